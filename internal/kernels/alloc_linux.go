//go:build !purego && amd64 && linux

package kernels

import (
	"runtime"
	"syscall"
)

// hugeMin is the smallest packed matrix put on transparent huge pages.
const hugeMin = 4 << 20

// weightBytes returns n zeroed bytes for the packed weights owned by pk
// (a *packed, or a *kpacked of kquant_amd64.go).
// Large ones are mapped outside the Go heap on 2 MiB-aligned transparent
// huge pages (MADV_HUGEPAGE): streaming a 600 MB model every decode step
// through 4 KiB pages costs a TLB miss and a restarted hardware prefetch
// every 4 KiB. The mapping is released when pk becomes unreachable.
func weightBytes[T any](pk *T, n int) []byte {
	if n < hugeMin {
		return alignedBytes(n)
	}
	const huge = 2 << 20
	raw, err := syscall.Mmap(-1, 0, n+huge, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return alignedBytes(n)
	}
	off := alignOffN(raw, huge)
	b := raw[off : off+n : off+n]
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE; best effort
	runtime.AddCleanup(pk, func(raw []byte) { syscall.Munmap(raw) }, raw)
	return b
}

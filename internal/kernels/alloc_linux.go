//go:build !purego && amd64 && linux

package kernels

import (
	"runtime"
	"sync"
	"syscall"
)

// Packed weights live outside the Go heap on 2 MiB-aligned transparent huge
// pages (MADV_HUGEPAGE): streaming a model every decode step through 4 KiB
// pages costs a TLB miss and a restarted hardware prefetch every 4 KiB.
// A matrix of at least hugeMin bytes gets a mapping of its own; smaller ones
// (every layer matrix of a 0.5B model) are carved one after another from
// shared slabs of slabBytes, so a layer's matrices sit on a few huge pages
// instead of thousands of small ones.
const (
	hugeMin   = 4 << 20
	slabBytes = 64 << 20
	hugePage  = 2 << 20
)

// weightBytes returns n zeroed bytes for the packed weights owned by pk
// (a *packed, or a *kpacked of kquant_amd64.go), 64-byte aligned. The
// memory is released when pk becomes unreachable (a slab when the last
// matrix carved from it does).
func weightBytes[T any](pk *T, n int) []byte {
	if n >= hugeMin {
		raw, b := hugeMapping(n)
		if raw == nil {
			return alignedBytes(n)
		}
		runtime.AddCleanup(pk, func(raw []byte) { syscall.Munmap(raw) }, raw)
		return b
	}
	s, b := slabCarve(n)
	if s == nil {
		return alignedBytes(n)
	}
	runtime.AddCleanup(pk, slabRelease, s)
	return b
}

// hugeMapping maps n zeroed bytes at a 2 MiB boundary with MADV_HUGEPAGE:
// the whole mapping (raw, to unmap) and its n aligned bytes; nil if the
// mapping fails.
func hugeMapping(n int) (raw, b []byte) {
	raw, err := syscall.Mmap(-1, 0, n+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil
	}
	off := alignOffN(raw, hugePage)
	b = raw[off : off+n : off+n]
	_ = syscall.Madvise(b, 14) // MADV_HUGEPAGE; best effort
	return raw, b
}

// slab is a huge-page mapping small matrices are carved from in order.
type slab struct {
	raw  []byte // the mapping (to unmap)
	mem  []byte // its 2 MiB-aligned slabBytes
	off  int    // the first byte not yet carved
	refs int    // matrices carved from it and still reachable
}

// slabs is the slab being carved (nil: none yet, or the last one was
// released); a full slab stays mapped until its last matrix is released.
var slabs struct {
	sync.Mutex
	cur *slab
}

// slabCarve returns the slab it carved n bytes (n < hugeMin) from and those
// bytes, zeroed (never carved before) and 64-byte aligned; nil if no slab
// can be mapped.
func slabCarve(n int) (*slab, []byte) {
	size := (n + 63) &^ 63
	slabs.Lock()
	defer slabs.Unlock()
	s := slabs.cur
	if s == nil || s.off+size > len(s.mem) {
		raw, mem := hugeMapping(slabBytes)
		if raw == nil {
			return nil, nil
		}
		s = &slab{raw: raw, mem: mem}
		slabs.cur = s
	}
	b := s.mem[s.off : s.off+n : s.off+n]
	s.off += size
	s.refs++
	return s, b
}

// slabRelease drops one matrix of s, unmapping s with its last one (a
// released slab is never carved again: a new one starts zeroed).
func slabRelease(s *slab) {
	slabs.Lock()
	defer slabs.Unlock()
	s.refs--
	if s.refs > 0 {
		return
	}
	if slabs.cur == s {
		slabs.cur = nil
	}
	syscall.Munmap(s.raw)
}

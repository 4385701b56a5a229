//go:build !purego && amd64 && linux

package kernels

import (
	"testing"
	"unsafe"
)

// TestWeightBytes: matrices below hugeMin are carved from shared slabs —
// zeroed, 64-byte aligned, never overlapping one another, a new slab when one
// is full — and larger ones get their own 2 MiB-aligned mapping.
func TestWeightBytes(t *testing.T) {
	type owner struct{ b []byte }
	var owners []*owner
	sizes := []int{1, 63, 64, 65, 4095, 896 * 504 / 16, hugeMin - 1, 3 << 20, 100}
	for range slabBytes/(hugeMin-1) + 2 { // more than a slab's worth
		sizes = append(sizes, hugeMin-1)
	}
	type span struct{ lo, hi uintptr }
	var spans []span
	for i, n := range sizes {
		o := &owner{}
		o.b = weightBytes(o, n)
		owners = append(owners, o)
		if len(o.b) != n || cap(o.b) != n {
			t.Fatalf("size %d: got len %d cap %d", n, len(o.b), cap(o.b))
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(o.b)))
		if p%64 != 0 {
			t.Fatalf("size %d: address %#x is not 64-byte aligned", n, p)
		}
		for j, c := range o.b {
			if c != 0 {
				t.Fatalf("size %d: byte %d is %d, want zeroed memory", n, j, c)
			}
		}
		for j := range o.b {
			o.b[j] = byte(i + 1)
		}
		spans = append(spans, span{p, p + uintptr(n)})
	}
	for i, a := range spans {
		for j, b := range spans[:i] {
			if a.lo < b.hi && b.lo < a.hi {
				t.Fatalf("matrix %d [%#x, %#x) overlaps matrix %d [%#x, %#x)", i, a.lo, a.hi, j, b.lo, b.hi)
			}
		}
	}
	for i, o := range owners { // nothing written later clobbered an earlier matrix
		for j, c := range o.b {
			if c != byte(i+1) {
				t.Fatalf("matrix %d byte %d is %d, want %d", i, j, c, i+1)
			}
		}
	}
	big := &owner{}
	big.b = weightBytes(big, hugeMin)
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(big.b))); p%hugePage != 0 || len(big.b) != hugeMin {
		t.Fatalf("a %d-byte matrix at %#x (len %d): want its own mapping at a 2 MiB boundary", hugeMin, p, len(big.b))
	}
}

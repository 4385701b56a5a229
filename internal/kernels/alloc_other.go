//go:build !purego && amd64 && !linux

package kernels

// weightBytes returns n zeroed bytes for the packed weights owned by pk.
func weightBytes(pk *packed, n int) []byte { return alignedBytes(n) }

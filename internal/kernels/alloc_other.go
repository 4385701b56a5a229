//go:build !purego && amd64 && !linux

package kernels

// weightBytes returns n zeroed bytes for the packed weights owned by pk
// (a *packed, or a *kpacked of kquant_amd64.go).
func weightBytes[T any](pk *T, n int) []byte { return alignedBytes(n) }

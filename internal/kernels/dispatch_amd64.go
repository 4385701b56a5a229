//go:build !purego

// Dispatch on amd64: chooses the kernels by CPU feature at init (AVX-512 with
// VNNI, else AVX2+FMA+F16C, else the plain-Go reference). SetImpl forces a
// slower path for tests and benchmarks; DRAFTD_KERNELS=avx2|generic does the
// same for a whole process.
//
// AMX (TDPBSSD/TDPBF16PS) is not implemented (Linux needs an arch_prctl
// permission request before tile registers can be used; no AMX code has
// been written or measured).
package kernels

import (
	"fmt"
	"os"

	"golang.org/x/sys/cpu"
)

type implID int

const (
	implGeneric implID = iota
	implAVX2
	implAVX512
)

var implNames = [...]string{implGeneric: "generic", implAVX2: "avx2", implAVX512: "avx512"}

var (
	// hasAVX2 gates the packed weight layout and the AVX2 kernels.
	hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	// hasAVX512 gates the AVX-512 kernels (VNNI for the int8 dot products).
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
		cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VNNI

	impl = bestImpl()
)

func bestImpl() implID {
	switch {
	case hasAVX512:
		return implAVX512
	case hasAVX2:
		return implAVX2
	}
	return implGeneric
}

func init() {
	if s := os.Getenv("DRAFTD_KERNELS"); s != "" {
		if err := SetImpl(s); err != nil {
			fmt.Fprintln(os.Stderr, "draftd:", err, "- using", Impl())
		}
	}
}

// Impl names the implementation in use, for logs and /v1/info.
func Impl() string { return implNames[impl] }

// Impls lists the implementations this build and CPU can run, fastest first.
func Impls() []string {
	var s []string
	for id := bestImpl(); id >= implGeneric; id-- {
		s = append(s, implNames[id])
	}
	return s
}

// SetImpl forces the implementation used by every kernel (one of Impls()).
// It is meant for tests and benchmarks and must not race with kernel calls.
func SetImpl(name string) error {
	for id := bestImpl(); id >= implGeneric; id-- {
		if implNames[id] == name {
			impl = id
			return nil
		}
	}
	return fmt.Errorf("kernels: implementation %q not available (have %v)", name, Impls())
}

// vecWidth is the float32 lanes of the implementation's vector kernels
// (0 for the plain-Go one).
func vecWidth() int {
	switch impl {
	case implAVX512:
		return 16
	case implAVX2:
		return 8
	}
	return 0
}

func argmax(x []float32) int {
	w := vecWidth()
	if w == 0 || len(x) < w {
		return argmaxGeneric(x)
	}
	n := len(x) &^ (w - 1)
	var best float32
	var i int
	if w == 16 {
		best, i = argmaxAVX512(&x[0], n)
	} else {
		best, i = argmaxAVX2(&x[0], n)
	}
	for j := n; j < len(x); j++ {
		if x[j] > best {
			best, i = x[j], j
		}
	}
	return i
}

func sumExp(x []float32, m float32) float64 {
	var n int
	var s float64
	switch impl {
	case implAVX512:
		if n = len(x) &^ 31; n > 0 {
			s = sumExpAVX512(&x[0], n, m)
		}
	case implAVX2:
		if n = len(x) &^ 7; n > 0 {
			s = sumExpAVX2(&x[0], n, m)
		}
	}
	return s + sumExpGeneric(x[n:], m)
}

func siluMul(out, gate, up []float32) {
	w := vecWidth()
	if w == 0 || len(gate) < w {
		siluMulGeneric(out, gate, up)
		return
	}
	n := len(gate) &^ (w - 1)
	if w == 16 {
		siluMulAVX512(&out[0], &gate[0], &up[0], n)
	} else {
		siluMulAVX2(&out[0], &gate[0], &up[0], n)
	}
	siluMulGeneric(out[n:], gate[n:], up[n:])
}

func f32ToF16(dst []uint16, src []float32) {
	w := vecWidth()
	if w == 0 || len(src) < w {
		f32ToF16Generic(dst, src)
		return
	}
	n := len(src) &^ (w - 1)
	if w == 16 {
		f32ToF16AVX512(&dst[0], &src[0], n)
	} else {
		f32ToF16AVX2(&dst[0], &src[0], n)
	}
	f32ToF16Generic(dst[n:], src[n:])
}

func sumSquares(x []float32) float64 {
	n := len(x) &^ 15
	if impl == implGeneric || n == 0 {
		return sumSquaresGeneric(x)
	}
	ss := sumSquaresAVX2(&x[0], n)
	for _, v := range x[n:] {
		ss += float64(v) * float64(v)
	}
	return ss
}

func scaleMul(out, x, w []float32, scale float32) {
	n := len(x) &^ 7
	if impl == implGeneric || n == 0 {
		scaleMulGeneric(out, x, w, scale)
		return
	}
	scaleMulAVX2(&out[0], &x[0], &w[0], scale, n)
	scaleMulGeneric(out[n:], x[n:len(x)], w[n:], scale)
}

func rope(x, c, s []float32, nHeads, half int) {
	if impl == implGeneric || half%8 != 0 || nHeads == 0 || half == 0 {
		ropeGeneric(x, c, s, nHeads, half)
		return
	}
	ropeAVX2(&x[0], &c[0], &s[0], half, nHeads)
}

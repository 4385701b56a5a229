// ggmltypes.go is the table of ggml tensor type storage sizes (elements per
// block, bytes per block), as ggml and gguf-py define them, so that a GGUF
// file holding types draftd cannot compute with can still be parsed, listed
// and bounds-checked. It is not a codec: decoding lives in internal/dtype.

package gguf

import (
	"fmt"

	"github.com/draftd/draftd/internal/dtype"
)

type ggmlTypeInfo struct {
	name       string
	blockSize  uint64 // elements per block
	blockBytes uint64 // bytes per block
}

// ggmlTypes is indexed by ggml type id. Ids that ggml removed (4, 5, 31–33,
// 36–38) are absent.
var ggmlTypes = map[dtype.Type]ggmlTypeInfo{
	0:  {"F32", 1, 4},
	1:  {"F16", 1, 2},
	2:  {"Q4_0", 32, 2 + 16},
	3:  {"Q4_1", 32, 2 + 2 + 16},
	6:  {"Q5_0", 32, 2 + 4 + 16},
	7:  {"Q5_1", 32, 2 + 2 + 4 + 16},
	8:  {"Q8_0", 32, 2 + 32},
	9:  {"Q8_1", 32, 4 + 32},
	10: {"Q2_K", 256, 256/16 + 256/4 + 2 + 2},
	11: {"Q3_K", 256, 256/8 + 256/4 + 12 + 2},
	12: {"Q4_K", 256, 2 + 2 + 12 + 256/2},
	13: {"Q5_K", 256, 2 + 2 + 12 + 256/8 + 256/2},
	14: {"Q6_K", 256, 256/2 + 256/4 + 256/16 + 2},
	15: {"Q8_K", 256, 4 + 256 + 256/16*2},
	16: {"IQ2_XXS", 256, 2 + 256/4},
	17: {"IQ2_XS", 256, 2 + 256/4 + 256/32},
	18: {"IQ3_XXS", 256, 2 + 256/4 + 256/8},
	19: {"IQ1_S", 256, 2 + 256/8 + 256/16},
	20: {"IQ4_NL", 32, 2 + 16},
	21: {"IQ3_S", 256, 2 + 256/4 + 256/8 + 256/32 + 4},
	22: {"IQ2_S", 256, 2 + 256/4 + 256/16},
	23: {"IQ4_XS", 256, 2 + 2 + 256/2 + 256/64},
	24: {"I8", 1, 1},
	25: {"I16", 1, 2},
	26: {"I32", 1, 4},
	27: {"I64", 1, 8},
	28: {"F64", 1, 8},
	29: {"IQ1_M", 256, 256/8 + 256/16 + 256/32},
	30: {"BF16", 1, 2},
	34: {"TQ1_0", 256, 2 + 4*13},
	35: {"TQ2_0", 256, 2 + 64},
	39: {"MXFP4", 32, 1 + 16},
}

// TypeName is the ggml name of t ("Q4_K"), including types draftd cannot
// compute with, or "ggml-type-N" for ids unknown to this package.
func TypeName(t dtype.Type) string {
	if ti, ok := ggmlTypes[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("ggml-type-%d", uint32(t))
}

// TypeSize reports the storage block of t: elements per block and bytes per
// block. ok is false for type ids this package does not know.
func TypeSize(t dtype.Type) (blockSize, blockBytes uint64, ok bool) {
	ti, ok := ggmlTypes[t]
	return ti.blockSize, ti.blockBytes, ok
}

// tensorBytes is the storage size of a tensor of type t and shape (ggml
// order), or an error when the type is unknown, the row is not a whole number
// of blocks, or the size overflows int64.
func tensorBytes(t dtype.Type, shape []uint64) (uint64, error) {
	ti, ok := ggmlTypes[t]
	if !ok {
		return 0, fmt.Errorf("unknown ggml tensor type %d", uint32(t))
	}
	n, err := numElements(shape)
	if err != nil {
		return 0, err
	}
	if len(shape) > 0 && shape[0]%ti.blockSize != 0 {
		return 0, fmt.Errorf("row length %d is not a multiple of the %s block size %d", shape[0], ti.name, ti.blockSize)
	}
	blocks := n / ti.blockSize
	if blocks != 0 && ti.blockBytes > maxInt64/blocks {
		return 0, fmt.Errorf("size of %d %s elements overflows", n, ti.name)
	}
	return blocks * ti.blockBytes, nil
}

const maxInt64 = 1<<63 - 1

// numElements is the product of shape, or an error if it exceeds int64
// (ggml stores dimensions as int64).
func numElements(shape []uint64) (uint64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d > maxInt64 {
			return 0, fmt.Errorf("dimension %d exceeds int64", d)
		}
		if d != 0 && n > maxInt64/d {
			return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
		n *= d
	}
	return n, nil
}

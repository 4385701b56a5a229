// The KV cache's storage types: f16 (the default), q8_0 (ggml's block_q8_0
// per 32 elements of one head's key or value row, quantized once when the
// position is written) and f32. This file names and parses them; the block
// layout is Block's (model.go), the attention over each is in
// internal/kernels.
package model

import (
	"fmt"

	"github.com/draftd/draftd/internal/dtype"
)

// KVType is the storage type of the KV cache.
type KVType int

const (
	KVF16  KVType = iota // IEEE half precision (the default)
	KVQ8_0               // ggml block_q8_0: per 32 elements an f16 scale d and 32 int8 q, x = d·q
	KVF32                // single precision
)

// KVTypes lists the cache types, default first.
var KVTypes = []KVType{KVF16, KVQ8_0, KVF32}

func (t KVType) String() string {
	switch t {
	case KVF16:
		return "f16"
	case KVQ8_0:
		return "q8_0"
	case KVF32:
		return "f32"
	}
	return fmt.Sprintf("KVType(%d)", int(t))
}

// ParseKVType reads a --kv-type value: f16, q8_0 or f32.
func ParseKVType(s string) (KVType, error) {
	for _, t := range KVTypes {
		if s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown KV cache type %q (want f16, q8_0 or f32)", s)
}

// kvRowBytes is the bytes of one position's key (or value) row of one KV
// head in cache type t.
func kvRowBytes(t KVType, headDim int) int {
	switch t {
	case KVQ8_0:
		return headDim / dtype.QK * dtype.Q8_0.BlockBytes()
	case KVF32:
		return 4 * headDim
	}
	return 2 * headDim
}

// checkKVType reports whether a model of head size headDim can keep its
// cache in t.
func checkKVType(t KVType, headDim int) error {
	switch t {
	case KVF16, KVF32:
		return nil
	case KVQ8_0:
		if headDim%dtype.QK != 0 {
			return fmt.Errorf("KV cache type q8_0 needs a head size that is a multiple of %d; the model's is %d", dtype.QK, headDim)
		}
		return nil
	}
	return fmt.Errorf("unknown KV cache type %v", t)
}

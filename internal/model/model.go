// Package model is draftd's decoder: one forward pass (forward.go) shared by
// every model family, each family declared by one small file
// (family_qwen3.go, family_qwen2.go, family_llama.go: names, config keys,
// tensor names and forward-pass flags; the numerics are stated in
// docs/development.md), bound to weights from a GGUF file (load_gguf.go) or an HF safetensors directory (load_hf.go). It
// does not schedule requests or own the KV cache's lifetime
// (internal/engine and internal/kvcache do); it only reads and writes the KV
// blocks a caller hands it.
package model

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/kernels"
)

// BlockSize is the number of positions in one KV block.
const BlockSize = 16

// Layer holds one decoder block's weights.
type Layer struct {
	AttnNorm            []float32       // (hidden)
	Q                   *kernels.Matrix // (heads·headDim, hidden)
	K, V                *kernels.Matrix // (kvHeads·headDim, hidden)
	O                   *kernels.Matrix // (hidden, heads·headDim)
	QBias, KBias, VBias []float32       // (heads·headDim), (kvHeads·headDim) ×2; nil without bias
	QNorm, KNorm        []float32       // (headDim); nil without q/k norm
	FFNNorm             []float32       // (hidden)
	Gate, Up            *kernels.Matrix // (intermediate, hidden)
	Down                *kernels.Matrix // (hidden, intermediate)
}

// Model is a loaded decoder. Forward may be called from one goroutine at a
// time (it serialises callers).
type Model struct {
	Config
	Embed   *kernels.Matrix // (vocab, hidden)
	Layer   []Layer         // (layers)
	OutNorm []float32       // (hidden)
	Output  *kernels.Matrix // (vocab, hidden); == Embed when tied

	Params      int64          // number of weights
	WeightBytes int64          // bytes of stored weights
	TypeCounts  map[string]int // tensors per storage type
	Tensors     []TensorInfo   // every bound tensor, in binding order

	src     source
	kv      KVType
	pool    *kernels.Pool
	invFreq []float32          // (headDim/2) RoPE inverse frequencies
	rope    *kernels.RoPETable // cos/sin of the positions used so far (ropeUpTo)

	draftHead *kernels.Matrix // (len(draftIDs), hidden) rows of Output the draft argmax runs over; nil: all
	draftIDs  []int           // (rows of draftHead) ascending vocabulary ids

	mu sync.Mutex
	sc scratch
}

func (m *Model) init(opt Options) {
	m.pool = kernels.NewPool(opt.Threads)
	m.invFreq = m.InvFreq()
}

// Close releases the worker pool and the file mapping. The model must not be
// used afterwards.
func (m *Model) Close() error {
	m.pool.Close()
	return m.src.Close()
}

// Path is the file or directory the model was loaded from.
func (m *Model) Path() string { return m.src.path() }

// Threads is the number of kernel workers.
func (m *Model) Threads() int { return m.pool.Threads() }

// KVF32 reports whether the KV cache is kept in f32.
func (m *Model) KVF32() bool { return m.kv == KVF32 }

// KVType is the KV cache's storage type.
func (m *Model) KVType() KVType { return m.kv }

// TensorInfo describes one stored tensor of a loaded model (HF name).
type TensorInfo struct {
	Name          string
	Type          dtype.Type
	Params, Bytes int64
}

// TypeShare is one storage type's part of a model's weights.
type TypeShare struct {
	Tensors       int     `json:"tensors"`
	Params        int64   `json:"parameters"`
	Bytes         int64   `json:"bytes"`
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// Mix is the model's weights by storage type (a K-quant mix such as Q4_K_M
// holds several).
func (m *Model) Mix() map[string]TypeShare {
	mix := map[string]TypeShare{}
	for _, t := range m.Tensors {
		s := mix[t.Type.String()]
		s.Tensors++
		s.Params += t.Params
		s.Bytes += t.Bytes
		s.BitsPerWeight = 8 * float64(s.Bytes) / float64(s.Params)
		mix[t.Type.String()] = s
	}
	return mix
}

// BitsPerWeight is the storage cost of all weights, in bits per weight.
func (m *Model) BitsPerWeight() float64 { return 8 * float64(m.WeightBytes) / float64(m.Params) }

// Block holds the keys and values of BlockSize consecutive positions for
// every layer. Exactly one of the f16, the q8_0 and the f32 pair is
// allocated.
type Block struct {
	K, V     []uint16  // f16 bits: (layers, kvHeads, BlockSize, headDim)
	K8, V8   []byte    // q8_0: (layers, kvHeads, BlockSize, headDim/32, 34) ggml block_q8_0
	K32, V32 []float32 // f32: (layers, kvHeads, BlockSize, headDim)
}

// BlockBytes is the memory one Block takes.
func (m *Model) BlockBytes() int {
	return 2 * m.Layers * m.KVHeads * BlockSize * kvRowBytes(m.kv, m.HeadDim)
}

// NewBlock allocates one zeroed KV block in the model's cache type.
func (m *Model) NewBlock() *Block {
	n := m.Layers * m.KVHeads * BlockSize * m.HeadDim
	switch m.kv {
	case KVF32:
		return &Block{K32: make([]float32, n), V32: make([]float32, n)}
	case KVQ8_0:
		nb := m.Layers * m.KVHeads * BlockSize * kvRowBytes(KVQ8_0, m.HeadDim)
		return &Block{K8: make([]byte, nb), V8: make([]byte, nb)}
	}
	return &Block{K: make([]uint16, n), V: make([]uint16, n)}
}

// Segment returns the key and value bytes of layer li, KV head g of b (one
// (BlockSize, row) segment each), whatever the cache type: for benchmarks
// and diagnostics that read the cache as attention does.
func (m *Model) Segment(b *Block, li, g int) (k, v []byte) {
	rb := kvRowBytes(m.kv, m.HeadDim)
	off, n := (li*m.KVHeads+g)*BlockSize*rb, BlockSize*rb
	switch m.kv {
	case KVF32:
		return f32Bytes(b.K32)[off : off+n], f32Bytes(b.V32)[off : off+n]
	case KVQ8_0:
		return b.K8[off : off+n], b.V8[off : off+n]
	}
	return u16Bytes(b.K)[off : off+n], u16Bytes(b.V)[off : off+n]
}

func f32Bytes(s []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}
func u16Bytes(s []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

// CopyPositions copies the keys and values of positions [0, npos) of every
// (layer, kvHead) segment from src to dst, blocks of the layout above with
// headDim elements per position (the prefix cache's copy-on-write).
func CopyPositions(dst, src *Block, npos, headDim int) {
	seg := BlockSize * headDim // one (layer, kvHead) segment
	n := npos * headDim
	if src.K8 != nil {
		rb := kvRowBytes(KVQ8_0, headDim)
		seg, n := BlockSize*rb, npos*rb
		for off := 0; off < len(src.K8); off += seg {
			copy(dst.K8[off:off+n], src.K8[off:off+n])
			copy(dst.V8[off:off+n], src.V8[off:off+n])
		}
		return
	}
	if src.K32 != nil {
		for off := 0; off < len(src.K32); off += seg {
			copy(dst.K32[off:off+n], src.K32[off:off+n])
			copy(dst.V32[off:off+n], src.V32[off:off+n])
		}
		return
	}
	for off := 0; off < len(src.K); off += seg {
		copy(dst.K[off:off+n], src.K[off:off+n])
		copy(dst.V[off:off+n], src.V[off:off+n])
	}
}

// String summarises the model for logs.
func (m *Model) String() string {
	return fmt.Sprintf("%s %d layers, hidden %d, heads %d/%d×%d, vocab %d, %.1fM params, %v",
		m.Arch, m.Layers, m.Hidden, m.Heads, m.KVHeads, m.HeadDim, m.Vocab, float64(m.Params)/1e6, m.TypeCounts)
}

package kvcache

import (
	"testing"

	"github.com/draftd/draftd/internal/model"
)

// TestBlockBytesPerKVType checks the cache's byte accounting for every KV
// type against the block layout computed here (f16: 2 bytes per element,
// f32: 4, q8_0: 34 bytes per 32 elements) and the bytes NewBlock really
// allocates, and that the budget counts blocks of that size.
func TestBlockBytesPerKVType(t *testing.T) {
	for _, kv := range model.KVTypes {
		t.Run(kv.String(), func(t *testing.T) {
			m, err := model.Load("../../testdata/models/tiny-qwen3-q8_0.gguf", model.Options{Threads: 1, KV: kv})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			elems := m.Layers * m.KVHeads * BlockSize * m.HeadDim // per K (and per V)
			want := map[model.KVType]int{model.KVF16: 2 * 2 * elems, model.KVF32: 2 * 4 * elems, model.KVQ8_0: 2 * elems / 32 * 34}[kv]
			spec := SpecOf(m)
			if spec.BlockBytes != want {
				t.Fatalf("BlockBytes %d; want %d", spec.BlockBytes, want)
			}
			b := spec.NewBlock()
			if have := 2*len(b.K) + 2*len(b.V) + len(b.K8) + len(b.V8) + 4*len(b.K32) + 4*len(b.V32); have != want {
				t.Fatalf("NewBlock allocates %d bytes; want %d", have, want)
			}
			budget := int64(10*want + want/2)
			c, err := New(spec, budget)
			if err != nil {
				t.Fatal(err)
			}
			if c.MaxBlocks() != 10 {
				t.Fatalf("a budget of %d bytes holds %d blocks; want 10", budget, c.MaxBlocks())
			}
		})
	}
}

// TestCopyPositionsQ8 checks the copy-on-write of a q8_0 block: positions
// [0, npos) of every (layer, head) segment are copied, nothing else.
func TestCopyPositionsQ8(t *testing.T) {
	m, err := model.Load("../../testdata/models/tiny-qwen3-q8_0.gguf", model.Options{Threads: 1, KV: model.KVQ8_0})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	src, dst := m.NewBlock(), m.NewBlock()
	for i := range src.K8 {
		src.K8[i], src.V8[i] = byte(i%251+1), byte(i%241+1)
	}
	const npos = 5
	model.CopyPositions(dst, src, npos, m.HeadDim)
	row := m.HeadDim / 32 * 34
	for i := range dst.K8 {
		copied := i%(BlockSize*row) < npos*row
		for _, p := range []struct {
			name     string
			have, in byte
		}{{"K", dst.K8[i], src.K8[i]}, {"V", dst.V8[i], src.V8[i]}} {
			if want := map[bool]byte{true: p.in}[copied]; p.have != want {
				t.Fatalf("%s byte %d: have %d; want %d", p.name, i, p.have, want)
			}
		}
	}
}

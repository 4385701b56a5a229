// convert.go lays out and writes the GGUF of one recipe: metadata as
// llama.cpp's convert_hf_to_gguf.py writes it (or the source GGUF's, when
// re-quantizing), then each tensor decoded row by row from the source and
// encoded by dtype.Quantize while the file is written, so memory holds one
// output tensor at a time. It is not the recipe table (recipe.go).

package quant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
)

// quantizationVersion is ggml's GGML_QNT_VERSION, written as
// general.quantization_version.
const quantizationVersion = 2

// Options tune a conversion.
type Options struct {
	Name    string // general.name (default: the source's base name)
	Threads int    // encoding goroutines; ≤ 0: all cores
	// Context, when set, stops a Write between tensors once it is done (the
	// partial file is removed).
	Context context.Context
	// HeadType, when set (one of HeadTypes), is the LM head's type instead
	// of the recipe's (llama-quantize's --output-tensor-type): output.weight,
	// or the embedding of a tied model.
	HeadType *dtype.Type
}

// Output is one laid-out GGUF: its exact size is known before any tensor is
// computed, because the GGUF layout is deterministic.
type Output struct {
	Recipe      Recipe
	Bytes       int64          // exact size of the file Write produces
	TensorTypes map[string]int // ggml type name → number of tensors
	Params      int64

	w *gguf.Writer
}

// ErrNoFit is returned by Auto when no recipe fits the byte budget.
var ErrNoFit = errors.New("no quantization recipe fits the byte budget")

// Layout prepares the GGUF of recipe r from s without computing a tensor.
func (s *Source) Layout(r Recipe, opt Options) (*Output, error) {
	if !r.Supported() {
		var names []string
		for _, t := range r.Types() {
			if !t.Supported() {
				names = append(names, gguf.TypeName(t))
			}
		}
		return nil, fmt.Errorf("quant: recipe %s needs tensor types draftd cannot encode yet (%s)", r.Name, strings.Join(names, ", "))
	}
	specs := make([]TensorSpec, len(s.tensors))
	var own []dtype.Type // a GGUF source's tensor types, for the recipe keep
	for i, t := range s.tensors {
		specs[i] = TensorSpec{Name: t.name, Shape: t.shape}
		if s.Format == "gguf" {
			own = append(own, t.raw)
		}
	}
	if opt.HeadType != nil && !slices.Contains(HeadTypes, *opt.HeadType) {
		return nil, fmt.Errorf("quant: %v is not an LM head type", *opt.HeadType)
	}
	types, err := r.plan(specs, s.Config.Layers, opt.HeadType, own)
	if err != nil {
		return nil, err
	}
	w := gguf.NewWriter()
	if err := s.metadata(w, r, opt); err != nil {
		return nil, err
	}
	out := &Output{Recipe: r, TensorTypes: map[string]int{}, Params: s.Params(), w: w}
	threads := opt.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	for i := range s.tensors {
		t, typ := &s.tensors[i], types[i]
		out.TensorTypes[gguf.TypeName(typ)]++
		fill := func(dst []byte) error {
			if opt.Context != nil && opt.Context.Err() != nil {
				return opt.Context.Err()
			}
			return t.encode(typ, dst, threads)
		}
		if err := w.AddTensorFunc(t.name, typ, t.shape, fill); err != nil {
			return nil, err
		}
	}
	out.Bytes = w.Size()
	return out, nil
}

// Write writes the file atomically (temporary file, sync, rename) and checks
// that its size on disk is the size laid out.
func (o *Output) Write(path string) error {
	if err := o.w.WriteFile(path); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() != o.Bytes {
		return fmt.Errorf("quant: %s is %d bytes; the layout said %d", path, st.Size(), o.Bytes)
	}
	return nil
}

// Candidates lists the recipes auto selection considers for s, best first:
// for a GGUF source Keep (the file as it is: re-encoding quantized weights
// into a recipe adds no quality, and a larger recipe only bytes to stream),
// then from the source's Ceiling down, skipping recipes whose types draftd
// cannot encode yet.
func (s *Source) Candidates() []Recipe {
	ceil := s.Ceiling()
	var out []Recipe
	if s.Format == "gguf" {
		out = append(out, Keep)
	}
	seen := false
	for _, r := range recipes {
		seen = seen || r.Name == ceil.Name
		if seen && r.Supported() {
			out = append(out, r)
		}
	}
	return out
}

// Auto lays out every candidate recipe and returns the first whose file is at
// most maxBytes; the error (wrapping ErrNoFit) lists each recipe's size.
func (s *Source) Auto(maxBytes int64, opt Options) (*Output, error) {
	var sizes []string
	for _, r := range s.Candidates() {
		o, err := s.Layout(r, opt)
		if err != nil {
			return nil, err
		}
		if o.Bytes <= maxBytes {
			return o, nil
		}
		sizes = append(sizes, fmt.Sprintf("%s %d", r.Name, o.Bytes))
	}
	return nil, fmt.Errorf("%w: budget %d bytes; smallest files: %s", ErrNoFit, maxBytes, strings.Join(sizes, ", "))
}

// encode writes the tensor in type typ into dst: a copy when the source
// already holds it in typ, else row by row through f32 on up to threads
// goroutines.
func (t *srcTensor) encode(typ dtype.Type, dst []byte, threads int) error {
	if t.rawData != nil && t.raw == typ {
		if len(t.rawData) != len(dst) {
			return fmt.Errorf("source holds %d bytes; want %d", len(t.rawData), len(dst))
		}
		copy(dst, t.rawData)
		return nil
	}
	cols, rows := int(t.shape[0]), t.rows()
	rb, err := typ.RowBytes(cols)
	if err != nil {
		return err
	}
	if rb*rows != len(dst) {
		return fmt.Errorf("%d rows of %d bytes do not fill %d bytes", rows, rb, len(dst))
	}
	threads = max(1, min(threads, rows))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := make([]float32, cols) // (cols) one decoded row
			for r := w; r < rows; r += threads {
				if err := t.row(row, r); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("row %d: %w", r, err))
					mu.Unlock()
					return
				}
				// Quantize appends in place: dst[r*rb:r*rb] has the capacity.
				if _, err := dtype.Quantize(typ, dst[r*rb:r*rb:(r+1)*rb], row); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("row %d: %w", r, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// metadata adds the GGUF metadata: copied from a GGUF source (with the new
// file type), or as convert_hf_to_gguf.py writes it for an HF source.
func (s *Source) metadata(w *gguf.Writer, r Recipe, opt Options) error {
	if s.Format == "gguf" {
		seenQV := false
		for _, kv := range s.meta {
			v := kv.Value
			switch kv.Key {
			case gguf.AlignmentKey:
				continue
			case "general.file_type":
				if !r.keep {
					v = r.FileType
				}
			case "general.quantization_version":
				v, seenQV = uint32(quantizationVersion), true
			}
			if err := w.Add(kv.Key, v); err != nil {
				return err
			}
		}
		if !w.Has("general.file_type") && !r.keep {
			if err := w.Add("general.file_type", r.FileType); err != nil {
				return err
			}
		}
		if !seenQV {
			return w.Add("general.quantization_version", uint32(quantizationVersion))
		}
		return nil
	}
	c := s.Config
	a := c.Arch
	name := opt.Name
	if name == "" {
		name = baseName(s.Path)
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: a},
		{Key: "general.type", Value: "model"},
		{Key: "general.name", Value: name},
		{Key: a + ".block_count", Value: uint32(c.Layers)},
		{Key: a + ".context_length", Value: uint32(c.MaxContext)},
		{Key: a + ".embedding_length", Value: uint32(c.Hidden)},
		{Key: a + ".feed_forward_length", Value: uint32(c.Intermediate)},
		{Key: a + ".attention.head_count", Value: uint32(c.Heads)},
		{Key: a + ".attention.head_count_kv", Value: uint32(c.KVHeads)},
		{Key: a + ".rope.freq_base", Value: float32(c.RopeTheta)},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: c.RMSEps},
	}
	if a == model.ArchQwen3 || c.HeadDim != c.Hidden/c.Heads {
		kvs = append(kvs, gguf.KV{Key: a + ".attention.key_length", Value: uint32(c.HeadDim)},
			gguf.KV{Key: a + ".attention.value_length", Value: uint32(c.HeadDim)})
	}
	kvs = append(kvs, gguf.KV{Key: "general.file_type", Value: r.FileType})
	if a == model.ArchLlama {
		kvs = append(kvs, gguf.KV{Key: a + ".vocab_size", Value: uint32(c.Vocab)},
			gguf.KV{Key: a + ".rope.dimension_count", Value: uint32(c.HeadDim)})
	}
	kvs = append(kvs, gguf.KV{Key: "general.quantization_version", Value: uint32(quantizationVersion)})
	for _, kv := range kvs {
		if err := w.Add(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	if s.Tokenizer != nil {
		return s.Tokenizer.WriteGGUFPadded(w, c.Vocab)
	}
	return nil
}

func baseName(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	return strings.TrimSuffix(p, ".gguf")
}

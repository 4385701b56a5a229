// source.go opens the model a GGUF is made from — an HF safetensors
// directory (F32/F16/BF16, FP8 E4M3 with block weight_scale_inv) or a GGUF
// file (re-quantized) — as a list of tensors in llama.cpp names, each
// decodable one row at a time, so that no tensor is ever widened to F32 as a
// whole. It is not a model loader: nothing here computes.

package quant

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/safetensors"
	"github.com/draftd/draftd/internal/tokenizer"
)

// Source is an opened model to convert.
type Source struct {
	Path   string
	Config *model.Config
	// Format is "hf" or "gguf"; DType is the storage type of its weight
	// matrices as the file names it ("BF16", "F8_E4M3", "Q8_0", ...).
	Format, DType string
	// Tokenizer is nil when an HF directory has no tokenizer.json.
	Tokenizer *tokenizer.Tokenizer

	tensors []srcTensor
	meta    []gguf.KV // GGUF source: its metadata, copied
	dir     *safetensors.Dir
	file    *gguf.File
}

// srcTensor is one tensor of the output file as the source holds it.
type srcTensor struct {
	name  string   // GGUF name
	shape []uint64 // ggml order: shape[0] is the row length
	// raw, when the output type equals it, is copied unchanged (rawData).
	raw     dtype.Type
	rawData []byte
	// row decodes output row r into dst (len shape[0]).
	row func(dst []float32, r int) error
}

func (t *srcTensor) rows() int {
	n := 1
	for _, d := range t.shape[1:] {
		n *= int(d)
	}
	return n
}

// Open opens path: a directory with config.json (HF) or a .gguf file.
func Open(path string) (*Source, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return openHF(path)
	}
	return openGGUF(path)
}

// Close releases the source's file mappings.
func (s *Source) Close() error {
	var errs []error
	if s.dir != nil {
		errs = append(errs, s.dir.Close())
	}
	if s.file != nil {
		errs = append(errs, s.file.Close())
	}
	return errors.Join(errs...)
}

// Params is the number of weights in the output file.
func (s *Source) Params() int64 {
	var n int64
	for _, t := range s.tensors {
		e := int64(1)
		for _, d := range t.shape {
			e *= int64(d)
		}
		n += e
	}
	return n
}

// Ceiling is the highest-quality recipe worth making from this source: its
// own type (a wider one adds nothing); q8_0 for FP8.
func (s *Source) Ceiling() Recipe {
	name := map[string]string{"F32": "f32", "BF16": "bf16", "F16": "f16", "F8_E4M3": "q8_0", "Q8_0": "q8_0", "Q4_0": "q4_0",
		"Q6_K": "q6_k", "Q5_K": "q5_k_m", "Q4_K": "q4_k_m"}[s.DType]
	if r, err := Lookup(name); err == nil {
		return r
	}
	return recipes[0]
}

func openHF(dir string) (*Source, error) {
	cfg, err := model.ConfigFromHF(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	d, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Source{Path: dir, Config: cfg, Format: "hf", dir: d}
	if err := s.bindHF(); err != nil {
		d.Close()
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		tok, err := tokenizer.LoadHF(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			d.Close()
			return nil, err
		}
		if tok.VocabSize() > cfg.Vocab {
			d.Close()
			return nil, fmt.Errorf("%s: tokenizer has %d tokens, more than vocab_size %d", dir, tok.VocabSize(), cfg.Vocab)
		}
		s.Tokenizer = tok
	}
	return s, nil
}

// maxBindErrors is how many binding errors bindHF reports before it only
// counts the rest (as the model loader does).
const maxBindErrors = 10

// clipName shortens a tensor name from a file for a message.
func clipName(name string) string {
	if len(name) <= 96 {
		return name
	}
	return strings.ToValidUTF8(name[:96], "") + fmt.Sprintf("… (%d bytes)", len(name))
}

func (s *Source) bindHF() error {
	c := s.Config
	weights, err := c.Weights()
	if err != nil {
		return err
	}
	used := map[string]bool{}
	var errs []error
	dropped := 0
	fail := func(err error) { // the first maxBindErrors, then a count: a config can claim 4,096 layers
		if len(errs) < maxBindErrors {
			errs = append(errs, err)
		} else {
			dropped++
		}
	}
	types := map[string]int{}
	for _, w := range weights {
		name, want := w.HF, w.Shape
		t, ok := s.dir.Tensor(name)
		if !ok {
			fail(fmt.Errorf("%s: missing tensor %s", s.Path, name))
			continue
		}
		used[name] = true
		if len(t.Shape) != len(want) || int(t.Shape[0]) != want[0] || (len(want) == 2 && int(t.Shape[1]) != want[1]) {
			fail(fmt.Errorf("%s: tensor %s has shape %v, want %v", t.File, name, t.Shape, want))
			continue
		}
		st, err := s.hfTensor(w, t, used)
		if err != nil {
			fail(err)
			continue
		}
		if len(want) == 2 {
			types[t.DType]++
		}
		s.tensors = append(s.tensors, st)
	}
	if f := c.RoPEFreqDivisors(); f != nil {
		// rope_scaling llama3: llama.cpp's converter stores it as this tensor.
		data, err := dtype.Quantize(dtype.F32, nil, f)
		if err != nil {
			return err
		}
		s.tensors = append(s.tensors, srcTensor{name: "rope_freqs.weight", shape: []uint64{uint64(len(f))}, raw: dtype.F32, rawData: data,
			row: func(dst []float32, r int) error { copy(dst, f); return nil }})
	}
	for _, name := range s.dir.Names() {
		switch {
		case used[name]:
		case name == "lm_head.weight" && c.TiedEmbed: // tied: the converter drops it
		case strings.HasSuffix(name, "rotary_emb.inv_freq"): // recomputed from rope_theta
		default:
			fail(fmt.Errorf("%s: tensor %s has no place in a %s GGUF", s.Path, clipName(name), c.Arch))
		}
	}
	if dropped > 0 {
		errs = append(errs, fmt.Errorf("%s: … and %d more errors", s.Path, dropped))
	}
	best := 0
	for dt, n := range types {
		if n > best || (n == best && dt < s.DType) {
			s.DType, best = dt, n
		}
	}
	return errors.Join(errs...)
}

// hfTensor describes one HF tensor as output rows, permuting llama Q/K rows
// for llama.cpp's interleaved RoPE as convert_hf_to_gguf.py does.
func (s *Source) hfTensor(w model.Weight, t *safetensors.Tensor, used map[string]bool) (srcTensor, error) {
	c, name := s.Config, w.HF
	cols, rows := int(t.Shape[len(t.Shape)-1]), 1
	if len(t.Shape) == 2 {
		rows = int(t.Shape[0])
	}
	out := srcTensor{name: w.GGUF}
	for i := len(t.Shape) - 1; i >= 0; i-- {
		out.shape = append(out.shape, uint64(t.Shape[i]))
	}
	var perm func(int) int // output row → source row; nil: the same
	if c.Arch == model.ArchLlama && (strings.Contains(w.GGUF, ".attn_q.") || strings.Contains(w.GGUF, ".attn_k.")) {
		heads := c.Heads
		if strings.Contains(name, ".k_proj.") {
			heads = c.KVHeads
		}
		perm = permutation(heads, c.HeadDim)
		if len(t.Shape) == 1 { // a bias: one "row" per element
			src := t
			typ, ok := dtype.FromSafetensors(src.DType)
			if !ok {
				return out, fmt.Errorf("%s: tensor %s has dtype %s; want F32, F16 or BF16", t.File, name, t.DType)
			}
			vals := make([]float32, cols) // (cols) the whole bias, tiny
			if err := dtype.Dequantize(typ, vals, src.Data); err != nil {
				return out, fmt.Errorf("%s: tensor %s: %w", t.File, name, err)
			}
			out.row = func(dst []float32, _ int) error {
				for i := range dst {
					dst[i] = vals[perm(i)]
				}
				return nil
			}
			return out, nil
		}
	}
	if typ, ok := dtype.FromSafetensors(t.DType); ok {
		rb := len(t.Data) / rows
		if perm == nil {
			out.raw, out.rawData = typ, t.Data
			perm = identity
		}
		out.row = func(dst []float32, r int) error {
			sr := perm(r)
			return dtype.Dequantize(typ, dst, t.Data[sr*rb:(sr+1)*rb])
		}
		return out, nil
	}
	if t.DType != "F8_E4M3" {
		return out, fmt.Errorf("%s: tensor %s has dtype %s; draftd reads F32, F16, BF16 and F8_E4M3", t.File, name, t.DType)
	}
	sc, err := s.dir.FP8Scales(name, t)
	if err != nil {
		return out, err
	}
	used[sc.Name] = true
	if perm == nil {
		perm = identity
	}
	out.row = func(dst []float32, r int) error {
		r = perm(r)
		codes := t.Data[r*cols : (r+1)*cols]                  // (cols) E4M3
		srow := sc.Scale[(r/sc.BR)*sc.SC : (r/sc.BR+1)*sc.SC] // (SC)
		for c, b := range codes {
			dst[c] = dtype.FP8E4M3[b] * srow[c/sc.BC]
		}
		return nil
	}
	return out, nil
}

func identity(r int) int { return r }

// permutation maps a GGUF row of a llama Q/K matrix to its HF row: within
// each head, GGUF row 2i+s holds HF row s·headDim/2 + i (llama.cpp's
// converter; model.PermuteRows does the same on bytes).
func permutation(heads, headDim int) func(int) int {
	half := headDim / 2
	return func(r int) int {
		h, j := r/headDim, r%headDim
		return h*headDim + (j%2)*half + j/2
	}
}

func openGGUF(path string) (*Source, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	cfg, err := model.ConfigFromGGUF(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Source{Path: path, Config: cfg, Format: "gguf", file: f}
	types := map[dtype.Type]int{}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		st := srcTensor{name: ti.Name, shape: ti.Shape, raw: ti.Type, rawData: ti.Data}
		rb, err := ti.Type.RowBytes(int(ti.Shape[0]))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: tensor %s: %w", path, ti.Name, err)
		}
		typ := ti.Type
		st.row = func(dst []float32, r int) error {
			return dtype.Dequantize(typ, dst, ti.Data[r*rb:(r+1)*rb])
		}
		if len(ti.Shape) >= 2 {
			types[ti.Type]++
		}
		s.tensors = append(s.tensors, st)
	}
	best := 0
	for t, n := range types {
		if n > best {
			s.DType, best = gguf.TypeName(t), n
		}
	}
	s.meta = f.KV
	if tok, err := tokenizer.FromGGUF(f); err == nil {
		s.Tokenizer = tok
	}
	return s, nil
}

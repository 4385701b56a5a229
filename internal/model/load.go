// Loading a model: open a GGUF file or an HF safetensors directory, read its
// Config, and bind every weight by name, with one error per missing or
// mis-shaped tensor. Weights stay in the file mapping unless they must be
// converted (llama GGUF Q/K rows, FP8, 1-D norms/biases widened to f32).
package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/safetensors"
)

// Options tune how a model is loaded and run.
type Options struct {
	Threads int  // worker goroutines for kernels; ≤ 0 means all cores
	KVF32   bool // keep the KV cache in f32 instead of f16
}

// tensor is one stored tensor as the binder sees it: shape in HF order
// (rows, cols) for matrices, (n) for vectors.
type tensor struct {
	typ   dtype.Type
	shape []int
	data  []byte
}

// source finds tensors by their HF name in one model file format.
type source interface {
	lookup(hfName string) (tensor, bool, error)
	path() string
	io.Closer
}

// Load opens path (a .gguf file or an HF directory with config.json) and binds
// its weights.
func Load(path string, opt Options) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var (
		cfg *Config
		src source
	)
	if st.IsDir() {
		cfg, src, err = openHF(path)
	} else {
		cfg, src, err = openGGUF(path)
	}
	if err != nil {
		return nil, err
	}
	m, err := bind(cfg, src, opt)
	if err != nil {
		src.Close()
		return nil, err
	}
	return m, nil
}

// LoadConfig reads only the configuration of the model at path.
func LoadConfig(path string) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		c, _, err := ConfigFromHF(filepath.Join(path, "config.json"))
		return c, err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ConfigFromGGUF(f)
}

// bind looks up every weight the architecture needs.
func bind(c *Config, src source, opt Options) (*Model, error) {
	m := &Model{Config: *c, src: src, kvF32: opt.KVF32}
	var errs []error
	// Matrices are checked here and built (repacked for the kernels) in
	// parallel below: repacking is most of the load time.
	var jobs []func() error
	mat := func(dst **kernels.Matrix, name string, rows, cols int) {
		t, ok, err := src.lookup(name)
		switch {
		case err != nil:
			errs = append(errs, err)
			return
		case !ok:
			errs = append(errs, fmt.Errorf("%s: missing tensor %s", src.path(), name))
			return
		case len(t.shape) != 2 || t.shape[0] != rows || t.shape[1] != cols:
			errs = append(errs, fmt.Errorf("%s: tensor %s has shape %v, want [%d %d]", src.path(), name, t.shape, rows, cols))
			return
		}
		m.countWeights(name, t.typ, rows*cols, len(t.data))
		jobs = append(jobs, func() error {
			w, err := kernels.NewMatrix(t.typ, rows, cols, t.data)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", src.path(), name, err)
			}
			*dst = w
			return nil
		})
	}
	vec := func(name string, n int) []float32 {
		t, ok, err := src.lookup(name)
		switch {
		case err != nil:
			errs = append(errs, err)
			return nil
		case !ok:
			errs = append(errs, fmt.Errorf("%s: missing tensor %s", src.path(), name))
			return nil
		case len(t.shape) != 1 || t.shape[0] != n:
			errs = append(errs, fmt.Errorf("%s: tensor %s has shape %v, want [%d]", src.path(), name, t.shape, n))
			return nil
		}
		v := make([]float32, n) // (n) widened copy
		if err := dtype.Dequantize(t.typ, v, t.data); err != nil {
			errs = append(errs, fmt.Errorf("%s: tensor %s: %w", src.path(), name, err))
			return nil
		}
		m.countWeights(name, t.typ, n, len(t.data))
		return v
	}
	h, q, kv, ff := c.Hidden, c.QDim(), c.KVDim(), c.Intermediate
	mat(&m.Embed, "model.embed_tokens.weight", c.Vocab, h)
	m.Layer = make([]Layer, c.Layers)
	for i := range m.Layer {
		l := &m.Layer[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		l.AttnNorm = vec(p+"input_layernorm.weight", h)
		mat(&l.Q, p+"self_attn.q_proj.weight", q, h)
		mat(&l.K, p+"self_attn.k_proj.weight", kv, h)
		mat(&l.V, p+"self_attn.v_proj.weight", kv, h)
		mat(&l.O, p+"self_attn.o_proj.weight", h, q)
		if c.QKVBias {
			l.QBias = vec(p+"self_attn.q_proj.bias", q)
			l.KBias = vec(p+"self_attn.k_proj.bias", kv)
			l.VBias = vec(p+"self_attn.v_proj.bias", kv)
		}
		if c.QKNorm {
			l.QNorm = vec(p+"self_attn.q_norm.weight", c.HeadDim)
			l.KNorm = vec(p+"self_attn.k_norm.weight", c.HeadDim)
		}
		l.FFNNorm = vec(p+"post_attention_layernorm.weight", h)
		mat(&l.Gate, p+"mlp.gate_proj.weight", ff, h)
		mat(&l.Up, p+"mlp.up_proj.weight", ff, h)
		mat(&l.Down, p+"mlp.down_proj.weight", h, ff)
	}
	m.OutNorm = vec("model.norm.weight", h)
	if !c.TiedEmbed {
		mat(&m.Output, "lm_head.weight", c.Vocab, h)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := runParallel(jobs, opt.Threads); err != nil {
		return nil, err
	}
	if c.TiedEmbed {
		m.Output = m.Embed
	}
	m.init(opt)
	return m, nil
}

// runParallel runs jobs on up to threads goroutines (≤ 0: all cores) and
// returns their errors joined.
func runParallel(jobs []func() error, threads int) error {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(threads, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(jobs); i = int(next.Add(1)) - 1 {
				if err := jobs[i](); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Model) countWeights(name string, t dtype.Type, n, bytes int) {
	if m.TypeCounts == nil {
		m.TypeCounts = map[string]int{}
	}
	m.Tensors = append(m.Tensors, TensorInfo{Name: name, Type: t, Params: int64(n), Bytes: int64(bytes)})
	m.TypeCounts[t.String()]++
	m.Params += int64(n)
	m.WeightBytes += int64(bytes)
}

// ---- GGUF ----

type ggufSource struct {
	f   *gguf.File
	cfg *Config
}

func openGGUF(path string) (*Config, source, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	c, err := ConfigFromGGUF(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, &ggufSource{f: f, cfg: c}, nil
}

func (s *ggufSource) path() string { return s.f.Path }
func (s *ggufSource) Close() error { return s.f.Close() }

// GGUFName maps an HF tensor name to llama.cpp's.
func GGUFName(hf string) string { return ggufNames.Replace(hf) }

var ggufNames = strings.NewReplacer(
	"model.embed_tokens.weight", "token_embd.weight",
	"model.norm.weight", "output_norm.weight",
	"lm_head.weight", "output.weight",
	"model.layers.", "blk.",
	".input_layernorm.", ".attn_norm.",
	".post_attention_layernorm.", ".ffn_norm.",
	".self_attn.q_proj.", ".attn_q.",
	".self_attn.k_proj.", ".attn_k.",
	".self_attn.v_proj.", ".attn_v.",
	".self_attn.o_proj.", ".attn_output.",
	".self_attn.q_norm.", ".attn_q_norm.",
	".self_attn.k_norm.", ".attn_k_norm.",
	".mlp.gate_proj.", ".ffn_gate.",
	".mlp.up_proj.", ".ffn_up.",
	".mlp.down_proj.", ".ffn_down.",
)

func (s *ggufSource) lookup(hf string) (tensor, bool, error) {
	name := GGUFName(hf)
	ti, ok := s.f.Tensor(name)
	if !ok {
		return tensor{}, false, nil
	}
	if !ti.Type.Supported() {
		return tensor{}, false, fmt.Errorf("%s: tensor %s has type %s; draftd computes with F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q2_K…Q6_K (not IQ types)", s.f.Path, name, gguf.TypeName(ti.Type))
	}
	shape := make([]int, len(ti.Shape)) // ggml order (ne0 innermost) reversed to HF order
	for i, d := range ti.Shape {
		shape[len(shape)-1-i] = int(d)
	}
	t := tensor{typ: ti.Type, shape: shape, data: ti.Data}
	// llama.cpp permutes Q/K rows of llama models for its interleaved RoPE;
	// undo it so one NeoX RoPE serves every architecture.
	if s.cfg.Arch == ArchLlama && (strings.HasSuffix(name, ".attn_q.weight") || strings.HasSuffix(name, ".attn_k.weight") ||
		strings.HasSuffix(name, ".attn_q.bias") || strings.HasSuffix(name, ".attn_k.bias")) {
		heads := s.cfg.Heads
		if strings.Contains(name, ".attn_k.") {
			heads = s.cfg.KVHeads
		}
		rows := shape[0]
		rowBytes := len(ti.Data) / rows
		if rows != heads*s.cfg.HeadDim {
			return tensor{}, false, fmt.Errorf("%s: tensor %s has %d rows, want %d", s.f.Path, name, rows, heads*s.cfg.HeadDim)
		}
		t.data = UnpermuteRows(ti.Data, heads, s.cfg.HeadDim, rowBytes)
	}
	return t, true, nil
}

// PermuteRows reorders the rows of a (heads·headDim, ·) matrix the way
// llama.cpp's converter does for llama Q/K: within each head, HF row
// s·headDim/2 + i becomes row 2i + s. rowBytes is the size of one row.
func PermuteRows(data []byte, heads, headDim, rowBytes int) []byte {
	return permuteRows(data, heads, headDim, rowBytes, false)
}

// UnpermuteRows inverts PermuteRows.
func UnpermuteRows(data []byte, heads, headDim, rowBytes int) []byte {
	return permuteRows(data, heads, headDim, rowBytes, true)
}

func permuteRows(data []byte, heads, headDim, rowBytes int, inverse bool) []byte {
	out := make([]byte, len(data))
	half := headDim / 2
	for h := range heads {
		for s := range 2 {
			for i := range half {
				hf := (h*headDim + s*half + i) * rowBytes
				gg := (h*headDim + 2*i + s) * rowBytes
				if inverse {
					hf, gg = gg, hf
				}
				copy(out[gg:gg+rowBytes], data[hf:hf+rowBytes])
			}
		}
	}
	return out
}

// ---- HF safetensors ----

type hfSource struct {
	dir *safetensors.Dir
	p   string
	hf  *hfConfig
}

func openHF(dir string) (*Config, source, error) {
	c, h, err := ConfigFromHF(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, nil, err
	}
	d, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	return c, &hfSource{dir: d, p: dir, hf: h}, nil
}

func (s *hfSource) path() string { return s.p }
func (s *hfSource) Close() error { return s.dir.Close() }

func (s *hfSource) lookup(name string) (tensor, bool, error) {
	t, ok := s.dir.Tensor(name)
	if !ok {
		return tensor{}, false, nil
	}
	shape := make([]int, len(t.Shape))
	for i, d := range t.Shape {
		shape[i] = int(d)
	}
	out := tensor{shape: shape, data: t.Data}
	if typ, ok := floatDType(t.DType); ok {
		out.typ = typ
		return out, true, nil
	}
	switch t.DType {
	case "F8_E4M3":
		data, err := s.dequantFP8(name, t)
		if err != nil {
			return tensor{}, false, err
		}
		out.typ, out.data = dtype.F32, data
	default:
		return tensor{}, false, fmt.Errorf("%s: tensor %s has dtype %s; draftd reads F32, F16, BF16 and F8_E4M3", t.File, name, t.DType)
	}
	return out, true, nil
}

// floatDType maps the safetensors float dtypes draftd computes with as stored.
func floatDType(s string) (dtype.Type, bool) {
	switch s {
	case "F32":
		return dtype.F32, true
	case "F16":
		return dtype.F16, true
	case "BF16":
		return dtype.BF16, true
	}
	return 0, false
}

// dequantFP8 widens an FP8 E4M3 weight with its block scales
// (`<name>_scale_inv`, one f32/bf16 per block of rows×cols) to f32.
func (s *hfSource) dequantFP8(name string, t *safetensors.Tensor) ([]byte, error) {
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("%s: FP8 tensor %s has %d dimensions, want 2", t.File, name, len(t.Shape))
	}
	sname := strings.TrimSuffix(name, ".weight") + ".weight_scale_inv"
	sc, ok := s.dir.Tensor(sname)
	if !ok {
		return nil, fmt.Errorf("%s: FP8 tensor %s has no %s", t.File, name, sname)
	}
	rows, cols := int(t.Shape[0]), int(t.Shape[1])
	if len(sc.Shape) != 2 || sc.Shape[0] <= 0 || sc.Shape[1] <= 0 {
		return nil, fmt.Errorf("%s: scale %s has shape %v, want 2 positive dimensions", sc.File, sname, sc.Shape)
	}
	sr, scc := int(sc.Shape[0]), int(sc.Shape[1])
	br, bc := (rows+sr-1)/sr, (cols+scc-1)/scc // block size
	if (rows+br-1)/br != sr || (cols+bc-1)/bc != scc {
		return nil, fmt.Errorf("%s: scale %s shape %v does not tile %s %v", sc.File, sname, sc.Shape, name, t.Shape)
	}
	scales := make([]float32, sr*scc) // (sr, scc)
	st, ok := floatDType(sc.DType)
	if !ok {
		return nil, fmt.Errorf("%s: scale %s has dtype %s; want F32, F16 or BF16", sc.File, sname, sc.DType)
	}
	if err := dtype.Dequantize(st, scales, sc.Data); err != nil {
		return nil, fmt.Errorf("%s: scale %s: %w", sc.File, sname, err)
	}
	out := make([]byte, rows*cols*4) // (rows, cols) f32
	for r := range rows {
		for c := range cols {
			v := fp8e4m3[t.Data[r*cols+c]] * scales[(r/br)*scc+c/bc]
			binary.LittleEndian.PutUint32(out[(r*cols+c)*4:], math.Float32bits(v))
		}
	}
	return out, nil
}

// fp8e4m3 decodes every OCP FP8 E4M3FN byte (bias 7, no infinities, 0x7f/0xff NaN).
var fp8e4m3 = func() (t [256]float32) {
	for i := range 256 {
		sign := float32(1)
		if i&0x80 != 0 {
			sign = -1
		}
		e, m := (i>>3)&0xf, i&7
		switch {
		case e == 0xf && m == 7:
			t[i] = float32(math.NaN())
		case e == 0:
			t[i] = sign * float32(m) / 8 * float32(math.Ldexp(1, -6))
		default:
			t[i] = sign * (1 + float32(m)/8) * float32(math.Ldexp(1, e-7))
		}
	}
	return t
}()

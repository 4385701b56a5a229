// Loading a model: open a GGUF file (load_gguf.go) or an HF safetensors
// directory (load_hf.go), read its Config, check the config's counts against
// the tensors the file holds, and bind every weight by the names its Family
// declares, with one error per missing or mis-shaped tensor. Weights stay in
// the file mapping unless they must be converted (llama GGUF Q/K rows, FP8,
// 1-D norms/biases widened to f32). This file knows no file format.
package model

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/kernels"
)

// Options tune how a model is loaded and run.
type Options struct {
	Threads int    // worker goroutines for kernels; ≤ 0 means all cores
	KV      KVType // the KV cache's storage type (default f16)
	KVF32   bool   // keep the KV cache in f32 (the same as KV: KVF32)
}

// tensor is one stored tensor as the binder sees it: shape in HF order
// (rows, cols) for matrices, (n) for vectors.
type tensor struct {
	typ   dtype.Type
	shape []int
	data  []byte
}

// source finds the tensors of one model file format by role.
type source interface {
	// lookup returns the tensor of role r (of layer, for per-layer roles)
	// and its name in the file; ok is false when the file has none.
	lookup(r role, layer int) (t tensor, name string, ok bool, err error)
	// numTensors is the number of tensors the file holds.
	numTensors() int
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
		return ConfigFromHF(filepath.Join(path, "config.json"))
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ConfigFromGGUF(f)
}

// maxBindErrors bounds the errors one load reports (the rest are counted).
const maxBindErrors = 10

// checkCounts compares the config's layer count with the tensors the file
// holds, before anything is sized from it: every layer has at least
// perLayer tensors, the last layer must exist and no layer beyond it. The
// widths are checked against the tensor shapes as each weight is bound,
// before anything is allocated from them.
func checkCounts(c *Config, src source) error {
	per := 9 // norms, q, k, v, o, gate, up, down
	if c.QKVBias {
		per += 3
	}
	if c.QKNorm {
		per += 2
	}
	if n := src.numTensors(); c.Layers > n/per {
		return fmt.Errorf("%s: %s = %d, but the file holds %d tensors, room for at most %d layers of %d tensors",
			src.path(), c.keys.Layers, c.Layers, n, n/per, per)
	}
	if _, name, ok, err := src.lookup(wAttnNorm, c.Layers-1); err != nil || !ok {
		return errors.Join(err, fmt.Errorf("%s: %s = %d, but the file has no tensor %s", src.path(), c.keys.Layers, c.Layers, name))
	}
	if _, name, ok, _ := src.lookup(wAttnNorm, c.Layers); ok {
		return fmt.Errorf("%s: %s = %d, but the file has tensor %s of a further layer", src.path(), c.keys.Layers, c.Layers, name)
	}
	return nil
}

// bind looks up every weight the architecture needs.
func bind(c *Config, src source, opt Options) (*Model, error) {
	if err := checkCounts(c, src); err != nil {
		return nil, err
	}
	kv := opt.KV
	if opt.KVF32 {
		kv = KVF32
	}
	if err := checkKVType(kv, c.HeadDim); err != nil {
		return nil, err
	}
	m := &Model{Config: *c, src: src, kv: kv}
	var errs []error
	dropped := 0
	fail := func(err error) {
		if len(errs) < maxBindErrors {
			errs = append(errs, err)
		} else {
			dropped++
		}
	}
	// find looks up one tensor and checks its shape.
	find := func(r role, layer int, shape ...int) (tensor, string, bool) {
		t, name, ok, err := src.lookup(r, layer)
		switch {
		case err != nil:
			fail(err)
			return t, name, false
		case !ok:
			fail(fmt.Errorf("%s: missing tensor %s", src.path(), name))
			return t, name, false
		case !slices.Equal(t.shape, shape):
			fail(fmt.Errorf("%s: tensor %s has shape %v, want %v", src.path(), name, t.shape, shape))
			return t, name, false
		}
		return t, name, true
	}
	// Matrices are checked here and built (repacked for the kernels) in
	// parallel below: repacking is most of the load time.
	var jobs []func() error
	mat := func(dst **kernels.Matrix, r role, layer, rows, cols int) {
		t, name, ok := find(r, layer, rows, cols)
		if !ok {
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
	vec := func(r role, layer, n int) []float32 {
		t, name, ok := find(r, layer, n)
		if !ok {
			return nil
		}
		v := make([]float32, n) // (n) widened copy
		if err := dtype.Dequantize(t.typ, v, t.data); err != nil {
			fail(fmt.Errorf("%s: tensor %s: %w", src.path(), name, err))
			return nil
		}
		m.countWeights(name, t.typ, n, len(t.data))
		return v
	}
	weights, err := c.Weights()
	if err != nil {
		return nil, err
	}
	m.Layer = make([]Layer, c.Layers) // checked against the file above
	for _, w := range weights {
		if len(w.Shape) == 2 {
			mat(m.matrix(w.role, w.layer), w.role, w.layer, w.Shape[0], w.Shape[1])
		} else {
			*m.vector(w.role, w.layer) = vec(w.role, w.layer, w.Shape[0])
		}
	}
	if dropped > 0 {
		errs = append(errs, fmt.Errorf("%s: … and %d more errors", src.path(), dropped))
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

// matrix is the field of m that holds the matrix of role r (of layer li).
func (m *Model) matrix(r role, li int) **kernels.Matrix {
	switch r {
	case wEmbed:
		return &m.Embed
	case wOutput:
		return &m.Output
	}
	l := &m.Layer[li]
	switch r {
	case wAttnQ:
		return &l.Q
	case wAttnK:
		return &l.K
	case wAttnV:
		return &l.V
	case wAttnO:
		return &l.O
	case wFFNGate:
		return &l.Gate
	case wFFNUp:
		return &l.Up
	case wFFNDown:
		return &l.Down
	}
	panic(fmt.Sprintf("model: role %d is not a matrix", r)) // Weights and this switch disagree
}

// vector is the field of m that holds the vector of role r (of layer li).
func (m *Model) vector(r role, li int) *[]float32 {
	if r == wOutNorm {
		return &m.OutNorm
	}
	l := &m.Layer[li]
	switch r {
	case wAttnNorm:
		return &l.AttnNorm
	case wAttnQBias:
		return &l.QBias
	case wAttnKBias:
		return &l.KBias
	case wAttnVBias:
		return &l.VBias
	case wAttnQNorm:
		return &l.QNorm
	case wAttnKNorm:
		return &l.KNorm
	case wFFNNorm:
		return &l.FFNNorm
	}
	panic(fmt.Sprintf("model: role %d is not a vector", r)) // Weights and this switch disagree
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

// draftd export: turns a GGUF model file (any weight type draftd reads) into
// a Hugging Face model directory — config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json and model.safetensors in bf16, f16 or
// f32 — that transformers and vLLM load. Weights are the exact
// dequantization of the file's (llama Q/K rows put back in HF order), then
// rounded to the chosen type to nearest, ties to even, as torch's .to()
// does. It streams one tensor at a time and writes into a temporary
// directory beside the output, renamed into place at the end. It is not a
// quantizer (see prepare) and reads no HF directories.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/fileio"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/safetensors"
	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("export", "write a GGUF model as a Hugging Face directory (safetensors bf16/f16/f32, config, tokenizer)", runExport)
}

// exportDTypes are the --dtype values: the safetensors dtype, torch's name
// and the encoder of one f32 value.
var exportDTypes = map[string]struct {
	st, torch string
	size      int
	put       func(dst []byte, v float32)
}{
	"bf16": {"BF16", "bfloat16", 2, func(d []byte, v float32) { binary.LittleEndian.PutUint16(d, dtype.F32ToBF16(v)) }},
	"f16":  {"F16", "float16", 2, func(d []byte, v float32) { binary.LittleEndian.PutUint16(d, dtype.F32ToF16(v)) }},
	"f32":  {"F32", "float32", 4, func(d []byte, v float32) { binary.LittleEndian.PutUint32(d, math.Float32bits(v)) }},
}

// hfArchitectures is config.json's architectures entry of each family.
var hfArchitectures = map[string]string{
	model.ArchQwen2: "Qwen2ForCausalLM",
	model.ArchQwen3: "Qwen3ForCausalLM",
	model.ArchLlama: "LlamaForCausalLM",
}

// Errors of export.
var (
	errExportUnsupported = errors.New("cannot be exported")
	errOutNotEmpty       = errors.New("exists and is not empty (--force replaces it)")
	errOutHoldsModel     = errors.New("holds the --model file: replacing it would delete the model (write the export elsewhere)")
)

// exportResult is what --json prints.
type exportResult struct {
	Dir     string  `json:"dir"`
	Arch    string  `json:"architecture"`
	DType   string  `json:"dtype"`
	Tensors int     `json:"tensors"`
	Params  int64   `json:"params"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

func runExport(ctx context.Context, args []string) error {
	fs := newFlags("export", "export --model FILE.gguf --out DIR [--dtype bf16|f16|f32] [--force] [--threads N] [--json]",
		"Writes the GGUF model as a Hugging Face directory: config.json, generation_config.json,\n"+
			"tokenizer.json, tokenizer_config.json and model.safetensors, which transformers and\n"+
			"vLLM load. Weights are the exact dequantization of the file's, rounded to --dtype.")
	var (
		modelPath = fs.String("model", "", "the GGUF file to export (required)")
		out       = fs.String("out", "", "the directory to write (required); it must not exist or be empty, unless --force")
		dt        = fs.String("dtype", "bf16", "weight type of model.safetensors: bf16, f16 or f32")
		force     = fs.Bool("force", false, "replace --out when it exists and is not empty")
		threads   = fs.Int("threads", 0, "conversion threads (0: all cores)")
		asJSON    = fs.Bool("json", false, `print {"dir","architecture","dtype","tensors","params","bytes","seconds"} on stdout`)
	)
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case *modelPath == "":
		return clientUsageError(fs, "--model is required")
	case *out == "":
		return clientUsageError(fs, "--out is required")
	case *threads < 0:
		return clientUsageError(fs, "--threads must not be negative")
	}
	if _, ok := exportDTypes[*dt]; !ok {
		return clientUsageError(fs, fmt.Sprintf("--dtype %q: want bf16, f16 or f32", *dt))
	}
	if *threads == 0 {
		*threads = runtime.GOMAXPROCS(0)
	}
	dir, err := checkExportDir(*out, *modelPath, *force)
	if err != nil {
		return fmt.Errorf("export: --out %w", err)
	}
	start := time.Now()
	res, err := exportGGUF(ctx, *modelPath, dir, *dt, *force, *threads)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	res.Seconds = time.Since(start).Seconds()
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%s, %d tensors, %d parameters, %s) in %.1f s\n", res.Dir, res.Arch, res.Tensors, res.Params, res.DType, res.Seconds)
	return nil
}

// checkExportDir validates --out before anything is written: a clean path
// whose last element is a name (not ".", ".." or a root), that is not a
// file, does not hold the model file, and is absent or empty unless force.
// A symbolic link to a directory stands for that directory. It returns the
// cleaned path (the link's target for a link).
func checkExportDir(out, modelPath string, force bool) (string, error) {
	if strings.IndexByte(out, 0) >= 0 {
		return "", fmt.Errorf("%q: contains a NUL byte", out)
	}
	dir := filepath.Clean(out)
	base := filepath.Base(dir)
	if base == "." || base == ".." || base == string(filepath.Separator) || dir == filepath.VolumeName(dir)+string(filepath.Separator) {
		return "", fmt.Errorf("%q: want a directory name, not %q", out, base)
	}
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return dir, nil
	case err != nil:
		return "", err
	case st.Mode()&os.ModeSymlink != 0:
		target, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", fmt.Errorf("%s: a symbolic link that does not lead to a directory: %w", dir, err)
		}
		if tst, err := os.Stat(target); err != nil || !tst.IsDir() {
			return "", fmt.Errorf("%s: a symbolic link to %s, which is not a directory", dir, target)
		}
		return checkExportDir(target, modelPath, force)
	case !st.IsDir():
		return "", fmt.Errorf("%s: exists and is not a directory", dir)
	}
	if inside(modelPath, dir) {
		return "", fmt.Errorf("%s: %w", dir, errOutHoldsModel)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	if len(ents) > 0 && !force {
		return "", fmt.Errorf("%s: %w", dir, errOutNotEmpty)
	}
	return dir, nil
}

// inside reports whether the file path lies under the directory dir, both
// with their symbolic links resolved.
func inside(path, dir string) bool {
	p, err1 := filepath.EvalSymlinks(path)
	d, err2 := filepath.EvalSymlinks(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	p, err1 = filepath.Abs(p)
	d, err2 = filepath.Abs(d)
	rel, err := filepath.Rel(d, p)
	return err1 == nil && err2 == nil && err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// exportTensor is one output tensor: its HF name and shape, and the GGUF
// tensor it comes from.
type exportTensor struct {
	w    model.Weight
	info *gguf.TensorInfo
}

func exportGGUF(ctx context.Context, path, out, dt string, force bool, threads int) (*exportResult, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, err := model.ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	if _, ok := hfArchitectures[cfg.Arch]; !ok {
		return nil, fmt.Errorf("%s: architecture %s %w (export writes %s)", path, cfg.Arch, errExportUnsupported, exportArchList())
	}
	if cfg.RoPEFreqFactors != nil {
		// llama.cpp's rope_freqs tensor: the llama3 parameters it was
		// computed from are not in the file, so no rope_scaling can be written.
		return nil, fmt.Errorf("%s: rope_freqs (llama3 RoPE scaling) %w: the file does not record the rope_scaling parameters", path, errExportUnsupported)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: tokenizer: %w", path, err)
	}
	tensors, err := exportPlan(path, f, cfg)
	if err != nil {
		return nil, err
	}
	res := &exportResult{Dir: out, Arch: hfArchitectures[cfg.Arch], DType: dt, Tensors: len(tensors)}
	for _, t := range tensors {
		n := int64(1)
		for _, d := range t.w.Shape {
			n *= int64(d)
		}
		res.Params += n
		res.Bytes += n * int64(exportDTypes[dt].size)
	}
	files, err := exportMetadata(cfg, tok, dt)
	if err != nil {
		return nil, err
	}

	parent := filepath.Dir(out)
	made, err := mkdirAllNew(parent)
	if err != nil {
		return nil, err
	}
	prefix := "." + filepath.Base(out) + ".export-"
	fileio.RemoveStaleDirs(parent, prefix) // what a killed export left
	tmp, unlock, err := fileio.TempDir(parent, prefix)
	if err != nil {
		removeNew(made)
		return nil, err
	}
	done := false
	defer func() {
		unlock()
		if !done {
			os.RemoveAll(tmp)
			removeNew(made)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	for _, name := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		data := files[name]
		if err := fileio.WriteAtomic(filepath.Join(tmp, name), func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
			return nil, err
		}
	}
	if err := writeExportWeights(ctx, filepath.Join(tmp, safetensors.SingleName), cfg, tensors, dt, threads); err != nil {
		return nil, err
	}
	testPause(ctx, "export-commit")
	if err := commitDir(ctx, tmp, out, force); err != nil {
		return nil, err
	}
	done = true
	return res, nil
}

// mkdirAllNew is os.MkdirAll that returns the directories it created,
// deepest first.
func mkdirAllNew(dir string) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, os.ErrNotExist) || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		removeNew(missing)
		return nil, err
	}
	return missing, nil
}

// removeNew removes the directories mkdirAllNew created, deepest first,
// each only while empty.
func removeNew(dirs []string) {
	for _, d := range dirs {
		if os.Remove(d) != nil {
			return
		}
	}
}

func exportArchList() string {
	return strings.Join([]string{model.ArchLlama, model.ArchQwen2, model.ArchQwen3}, ", ")
}

// exportPlan lists the output tensors in the order model.Config.Weights
// gives, each checked against the GGUF file (present, readable type, shape);
// a tensor of the file that has no place in the HF model is an error.
func exportPlan(path string, f *gguf.File, cfg *model.Config) ([]exportTensor, error) {
	weights, err := cfg.Weights()
	if err != nil {
		return nil, err
	}
	var errs []error
	used := map[string]bool{}
	var out []exportTensor
	for _, w := range weights {
		ti, ok := f.Tensor(w.GGUF)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: missing tensor %s", path, w.GGUF))
			continue
		}
		used[w.GGUF] = true
		if !ti.Type.Supported() {
			errs = append(errs, fmt.Errorf("%s: tensor %s has type %s; draftd reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q2_K…Q6_K (not IQ types)", path, w.GGUF, gguf.TypeName(ti.Type)))
			continue
		}
		shape := make([]int, len(ti.Shape)) // ggml order reversed: HF order
		for i, d := range ti.Shape {
			shape[len(shape)-1-i] = int(d)
		}
		if fmt.Sprint(shape) != fmt.Sprint(w.Shape) {
			errs = append(errs, fmt.Errorf("%s: tensor %s has shape %v, want %v", path, w.GGUF, shape, w.Shape))
			continue
		}
		out = append(out, exportTensor{w: w, info: ti})
		if len(errs) >= 10 {
			break
		}
	}
	for i := range f.Tensors {
		if name := f.Tensors[i].Name; !used[name] && len(errs) < 10 {
			errs = append(errs, fmt.Errorf("%s: tensor %s has no place in a %s model", path, name, hfArchitectures[cfg.Arch]))
		}
	}
	return out, errors.Join(errs...)
}

// writeExportWeights writes model.safetensors, one tensor at a time: the
// GGUF bytes in HF row order, dequantized row by row to f32 and encoded as
// dt, rows split over threads.
func writeExportWeights(ctx context.Context, path string, cfg *model.Config, tensors []exportTensor, dt string, threads int) error {
	enc := exportDTypes[dt]
	specs := make([]safetensors.Tensor, len(tensors))
	for i, t := range tensors {
		shape := make([]int64, len(t.w.Shape))
		for j, d := range t.w.Shape {
			shape[j] = int64(d)
		}
		specs[i] = safetensors.Tensor{Name: t.w.HF, DType: enc.st, Shape: shape}
	}
	meta := map[string]string{"format": "pt"}
	return safetensors.WriteStream(path, specs, meta, func(i int, dst []byte) error {
		if ctx.Err() != nil {
			return errInterrupted
		}
		t := tensors[i]
		ti := t.info
		cols := int(ti.Shape[0])
		rows := len(dst) / (cols * enc.size)
		data, err := cfg.HFRowOrder(t.w, t.w.Shape[0], ti.Data) // a vector's "rows" are its elements
		if err != nil {
			return err
		}
		rb, err := ti.Type.RowBytes(cols)
		if err != nil {
			return err
		}
		if len(data) != rows*rb {
			return fmt.Errorf("%d bytes of %s data for %d rows of %d; want %d", len(data), gguf.TypeName(ti.Type), rows, cols, rows*rb)
		}
		return convertRows(ctx, dst, data, ti.Type, rows, cols, rb, enc.size, enc.put, threads)
	})
}

// convertRows dequantizes rows rows of cols values (rb bytes each, type
// typ) from src and writes them into dst as size-byte values through put,
// in chunks of rows over threads goroutines.
func convertRows(ctx context.Context, dst, src []byte, typ dtype.Type, rows, cols, rb, size int, put func([]byte, float32), threads int) error {
	const chunk = 256 // rows per job: a few hundred KB of output
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range min(threads, (rows+chunk-1)/chunk) {
		wg.Go(func() {
			row := make([]float32, cols) // (cols) one dequantized row
			for {
				mu.Lock()
				r0 := next
				next += chunk
				stop := firstErr != nil
				mu.Unlock()
				if stop || r0 >= rows {
					return
				}
				if ctx.Err() != nil {
					mu.Lock()
					firstErr = errInterrupted
					mu.Unlock()
					return
				}
				for r := r0; r < min(r0+chunk, rows); r++ {
					if err := dtype.Dequantize(typ, row, src[r*rb:(r+1)*rb]); err != nil {
						mu.Lock()
						firstErr = fmt.Errorf("row %d: %w", r, err)
						mu.Unlock()
						return
					}
					o := dst[r*cols*size : (r+1)*cols*size]
					for c, v := range row {
						put(o[c*size:], v)
					}
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// exportMetadata returns the JSON files of the directory: config.json,
// generation_config.json, tokenizer.json and tokenizer_config.json.
func exportMetadata(cfg *model.Config, tok *tokenizer.Tokenizer, dt string) (map[string][]byte, error) {
	torch := exportDTypes[dt].torch
	// f32 values of the GGUF written as the shortest decimal that reads
	// back as the same float32 (1e-06, not 9.999999974752427e-07).
	f32 := func(v float64) json.Number { return json.Number(strconv.FormatFloat(float64(float32(v)), 'g', -1, 32)) }
	id := func(v int) any {
		if v < 0 {
			return nil
		}
		return v
	}
	c := map[string]any{
		"architectures":           []string{hfArchitectures[cfg.Arch]},
		"model_type":              cfg.Arch,
		"hidden_size":             cfg.Hidden,
		"intermediate_size":       cfg.Intermediate,
		"num_hidden_layers":       cfg.Layers,
		"num_attention_heads":     cfg.Heads,
		"num_key_value_heads":     cfg.KVHeads,
		"hidden_act":              "silu",
		"rms_norm_eps":            f32(float64(cfg.RMSEps)),
		"rope_theta":              f32(cfg.RopeTheta),
		"rope_parameters":         map[string]any{"rope_type": "default", "rope_theta": f32(cfg.RopeTheta)},
		"rope_scaling":            nil,
		"max_position_embeddings": cfg.MaxContext,
		"vocab_size":              cfg.Vocab,
		"tie_word_embeddings":     cfg.TiedEmbed,
		"bos_token_id":            id(cfg.BOS),
		"eos_token_id":            id(cfg.EOS),
		"pad_token_id":            id(tok.PAD()),
		"attention_dropout":       0.0,
		"initializer_range":       0.02,
		"use_cache":               true,
		"torch_dtype":             torch,
		"dtype":                   torch,
	}
	switch cfg.Arch {
	case model.ArchQwen2, model.ArchQwen3:
		c["use_sliding_window"] = false
		c["sliding_window"] = nil
		c["max_window_layers"] = cfg.Layers
	}
	switch cfg.Arch {
	case model.ArchQwen3, model.ArchLlama:
		c["head_dim"] = cfg.HeadDim
		c["attention_bias"] = false
		c["mlp_bias"] = false
	default: // Qwen2Config has no head_dim: the model takes hidden/heads
		if cfg.HeadDim != cfg.Hidden/cfg.Heads {
			return nil, fmt.Errorf("%s head_dim %d is not hidden/heads = %d: %w", cfg.Arch, cfg.HeadDim, cfg.Hidden/cfg.Heads, errExportUnsupported)
		}
	}
	files := map[string][]byte{}
	var err error
	if files["config.json"], err = indentJSON(c); err != nil {
		return nil, err
	}
	gen := map[string]any{"bos_token_id": id(cfg.BOS), "eos_token_id": id(cfg.EOS)}
	if tok.PAD() >= 0 {
		gen["pad_token_id"] = tok.PAD()
	}
	if files["generation_config.json"], err = indentJSON(gen); err != nil {
		return nil, err
	}
	if files["tokenizer.json"], err = tok.HFTokenizerJSON(); err != nil {
		return nil, err
	}
	if files["tokenizer_config.json"], err = tok.HFTokenizerConfig(cfg.MaxContext); err != nil {
		return nil, err
	}
	return files, nil
}

func indentJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}

// commitDir puts the finished directory tmp in place of out, as the last
// step of an export, and is where a signal stops being able to stop it:
// nothing is renamed once ctx has ended, and a signal that arrives between
// the rename and the check after it is undone (out put back as it was).
// An absent out is replaced in one rename; an existing one (empty, or not
// with force) is swapped with tmp in one atomic exchange where the system
// has it (Linux), else moved aside first. The old content is then removed.
func commitDir(ctx context.Context, tmp, out string, force bool) error {
	if ctx.Err() != nil {
		return errInterrupted
	}
	if err := fileio.SyncDir(tmp); err != nil {
		return err
	}
	st, err := os.Lstat(out)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Rename(tmp, out); err != nil {
			return err
		}
		testPause(ctx, "export-renamed")
		if ctx.Err() != nil {
			os.Rename(out, tmp) // the deferred cleanup removes it
			return errInterrupted
		}
		return fileio.SyncDir(filepath.Dir(out))
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s: exists and is not a directory", out)
	}
	if ents, err := os.ReadDir(out); err != nil {
		return err
	} else if len(ents) > 0 && !force {
		return fmt.Errorf("%s: %w", out, errOutNotEmpty)
	}
	err = fileio.Exchange(tmp, out)
	if errors.Is(err, errors.ErrUnsupported) {
		return replaceAside(ctx, tmp, out)
	}
	if err != nil {
		return err
	}
	testPause(ctx, "export-renamed")
	if ctx.Err() != nil {
		if err := fileio.Exchange(tmp, out); err != nil {
			return fmt.Errorf("%w; putting %s back: %v (the old directory is %s)", errInterrupted, out, err, tmp)
		}
		return errInterrupted
	}
	// tmp now holds the old directory: a process killed while it is
	// removed leaves it to the next export's cleanup.
	if err := fileio.SyncDir(filepath.Dir(out)); err != nil {
		return err
	}
	return os.RemoveAll(tmp)
}

// replaceAside is commitDir's way without an atomic exchange: out is moved
// aside to tmp + ".old", tmp renamed to out, the old one removed.
func replaceAside(ctx context.Context, tmp, out string) error {
	old := tmp + ".old"
	if err := os.Rename(out, old); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Rename(old, out) // put the old directory back
		return err
	}
	testPause(ctx, "export-renamed")
	if ctx.Err() != nil {
		err := os.Rename(out, tmp)
		if err == nil {
			err = os.Rename(old, out)
		}
		if err != nil {
			return fmt.Errorf("%w; putting %s back: %v (the old directory is %s)", errInterrupted, out, err, old)
		}
		return errInterrupted
	}
	if err := fileio.SyncDir(filepath.Dir(out)); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// testPause stops at the named point when DRAFTD_TEST_PAUSE names it: it
// says so on stderr ("draftd: paused at NAME") and waits until ctx ends (a
// signal), so that a test can signal a process at a known stage without
// sleeping. Without the variable it does nothing.
func testPause(ctx context.Context, name string) {
	if os.Getenv("DRAFTD_TEST_PAUSE") != name {
		return
	}
	fmt.Fprintf(os.Stderr, "draftd: paused at %s (DRAFTD_TEST_PAUSE)\n", name)
	<-ctx.Done()
}

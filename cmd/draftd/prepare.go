// draftd prepare: from a Hugging Face model id (downloaded into the HF
// cache), a local HF directory or a GGUF file to one GGUF file of a chosen
// quantization recipe, or, with --quant auto, the best recipe whose file fits
// the deployment budget (binary + model ≤ 1,000,000,000 bytes). Also the hook
// that lets `draftd serve --model Org/Name[@rev]` prepare on first start.
// Downloading lives in internal/hub, conversion in internal/quant.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/hub"
	"github.com/draftd/draftd/internal/quant"
)

func init() {
	register("prepare", "download (Hugging Face Hub) and quantize a model into one GGUF under a byte budget", runPrepare)
}

// deployBudget is the reference deployment's limit on binary + model.
const deployBudget = 1_000_000_000

// defaultMaxBytes is the budget left for the model: deployBudget minus the
// size of the running draftd binary.
func defaultMaxBytes() (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("size of the draftd binary: %w", err)
	}
	st, err := os.Stat(exe)
	if err != nil {
		return 0, fmt.Errorf("size of the draftd binary: %w", err)
	}
	return deployBudget - st.Size(), nil
}

// prepareResult is what --json prints.
type prepareResult struct {
	File        string         `json:"file"`
	Bytes       int64          `json:"bytes"`
	Model       string         `json:"model"`
	Revision    string         `json:"revision"` // the commit for a Hub model; "" for a local one
	Quant       string         `json:"quant"`
	HeadType    string         `json:"head_type,omitempty"` // --head-type, when given
	TensorTypes map[string]int `json:"tensor_types"`
	Params      int64          `json:"params"`
}

func runPrepare(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		out      = fs.String("out", "", "write the GGUF file here (required)")
		revision = fs.String("revision", "", "Hub revision: branch, tag or commit (default main; or MODEL@REV)")
		qname    = fs.String("quant", "auto", "recipe: auto, keep (a GGUF's own tensor types), "+recipeNames())
		headName = fs.String("head-type", "", "the LM head's type instead of the recipe's: "+headTypeNames())
		maxBytes = fs.Int64("max-bytes", 0, fmt.Sprintf("largest file allowed (default %d minus the size of this binary)", deployBudget))
		asJSON   = fs.Bool("json", false, `print {"file","bytes","model","revision","quant","head_type" (with --head-type),"tensor_types","params"}`)
		threads  = fs.Int("threads", 0, "encoding threads (0: all cores)")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd prepare MODEL --out FILE.gguf [--revision REV] [--quant Q] [--head-type T] [--max-bytes B] [--json]\n\n"+
			"MODEL is a Hugging Face model id (Qwen/Qwen3-1.7B[@rev]), a local HF directory or\n"+
			"a GGUF file (re-quantized). Hub downloads go to the Hugging Face cache\n"+
			"(HF_HUB_CACHE, default $HF_HOME/hub); HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE=1\n"+
			"are honoured. --quant auto picks the highest-quality recipe whose file fits\n"+
			"--max-bytes. --quant keep copies a GGUF's tensors as they are; with --head-type\n"+
			"it re-encodes the LM head alone.\n\nflags:")
		fs.PrintDefaults()
	}
	var pos []string
	for len(args) > 0 { // MODEL may come before, between or after the flags
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(pos) == 0:
		return clientUsageError(fs, "MODEL is required")
	case len(pos) > 1:
		return clientUsageError(fs, fmt.Sprintf("unexpected argument %q", pos[1]))
	case *out == "":
		return clientUsageError(fs, "--out is required")
	case *qname != "auto":
		if _, err := quant.Lookup(*qname); err != nil {
			return clientUsageError(fs, err.Error())
		}
	}
	var head *dtype.Type
	if *headName != "" {
		t, err := quant.ParseHeadType(*headName)
		if err != nil {
			return clientUsageError(fs, "--head-type: "+err.Error())
		}
		head = &t
	}
	if *maxBytes < 0 {
		return clientUsageError(fs, fmt.Sprintf("--max-bytes %d must be positive", *maxBytes))
	}
	if *maxBytes == 0 {
		mb, err := defaultMaxBytes()
		if err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
		*maxBytes = mb
	}
	if *threads < 0 {
		return clientUsageError(fs, "--threads must not be negative")
	}
	ref := pos[0]
	if *revision != "" {
		if strings.Contains(ref, "@") {
			return clientUsageError(fs, "give the revision either as MODEL@REV or with --revision, not both")
		}
		ref += "@" + *revision
	}
	log := io.Writer(os.Stdout)
	if *asJSON {
		log = os.Stderr
	}
	src, err := fetchModel(ctx, ref, log, !*asJSON)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	res, err := convertModel(ctx, src, *out, *qname, head, *maxBytes, *threads, log)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		return enc.Encode(res)
	}
	return nil
}

func headTypeNames() string {
	var names []string
	for _, t := range quant.HeadTypes {
		names = append(names, strings.ToLower(t.String()))
	}
	return strings.Join(names, ", ")
}

func recipeNames() string {
	var names []string
	for _, r := range quant.Recipes() {
		names = append(names, r.Name)
	}
	return strings.Join(names, ", ")
}

// fetched is a model on local disk, with where it came from.
type fetched struct {
	Path     string // HF directory or GGUF file
	Model    string // the name the user gave (repo id or path)
	Repo     string // Hub repo id, "" for a local model
	Revision string // commit, "" for a local model
}

// fetchModel finds ref on disk, or downloads the Hub model ref names
// (Org/Name[@rev]) into the Hugging Face cache.
func fetchModel(ctx context.Context, ref string, log io.Writer, progress bool) (*fetched, error) {
	if _, err := os.Stat(ref); err == nil {
		return &fetched{Path: ref, Model: ref}, nil
	}
	repo, rev, err := hub.ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("MODEL %q is neither a file or directory here nor a Hugging Face model id (Org/Name[@revision])", ref)
	}
	c := hub.FromEnv()
	if progress && isTerminal(os.Stdout) {
		c.Progress = os.Stderr
	}
	fmt.Fprintf(log, "prepare: fetching %s@%s from %s into %s\n", repo, orMain(rev), c.Endpoint, c.CacheDir)
	dir, commit, err := c.Snapshot(ctx, repo, rev, hub.DefaultFiles)
	if err != nil {
		return nil, err
	}
	return &fetched{Path: dir, Model: repo, Repo: repo, Revision: commit}, nil
}

func orMain(rev string) string {
	if rev == "" {
		return "main"
	}
	return rev
}

// convertModel writes src as a GGUF of recipe qname ("auto": the best that
// fits maxBytes) with the LM head in head (nil: the recipe's type) to out,
// and checks the written file against the budget.
func convertModel(ctx context.Context, src *fetched, out, qname string, head *dtype.Type, maxBytes int64, threads int, log io.Writer) (*prepareResult, error) {
	s, err := quant.Open(src.Path)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	name := src.Repo
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(filepath.Clean(src.Path)), ".gguf")
	} else {
		name = name[strings.IndexByte(name, '/')+1:]
	}
	opt := quant.Options{Name: name, Threads: threads, Context: ctx, HeadType: head}
	var o *quant.Output
	if qname == "auto" {
		if o, err = s.Auto(maxBytes, opt); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "prepare: --quant auto chose %s: %d bytes, within --max-bytes %d (source %s %s)\n", o.Recipe.Name, o.Bytes, maxBytes, s.Format, s.DType)
	} else {
		r, err := quant.Lookup(qname)
		if err != nil {
			return nil, err
		}
		if o, err = s.Layout(r, opt); err != nil {
			return nil, err
		}
		if o.Bytes > maxBytes {
			return nil, fmt.Errorf("%s makes a file of %d bytes, over --max-bytes %d: choose a smaller --quant or --quant auto", r.Name, o.Bytes, maxBytes)
		}
		fmt.Fprintf(log, "prepare: %s: %d bytes (--max-bytes %d)\n", r.Name, o.Bytes, maxBytes)
	}
	if s.Tokenizer == nil {
		fmt.Fprintf(log, "prepare: warning: %s has no tokenizer.json; the GGUF holds no tokenizer (draftd serves token ids without one)\n", src.Path)
	}
	if err := o.Write(out); err != nil {
		return nil, err
	}
	st, err := os.Stat(out)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxBytes { // checked on disk, not only laid out
		os.Remove(out)
		return nil, fmt.Errorf("%s is %d bytes, over --max-bytes %d; removed it", out, st.Size(), maxBytes)
	}
	fmt.Fprintf(log, "prepare: wrote %s (%d bytes, %d parameters, tensors %v)\n", out, st.Size(), o.Params, o.TensorTypes)
	res := &prepareResult{File: out, Bytes: st.Size(), Model: src.Model, Revision: src.Revision, Quant: o.Recipe.Name,
		TensorTypes: o.TensorTypes, Params: o.Params}
	if head != nil {
		res.HeadType = strings.ToLower(head.String())
	}
	return res, nil
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// localLooking says why arg, a valid Hub id that is no local file, reads
// as a mistyped local path ("": it does not): a model file's extension, or
// a first element that is a local directory.
func localLooking(arg string) string {
	name := strings.SplitN(arg, "@", 2)[0]
	switch ext := strings.ToLower(path.Ext(name)); ext {
	case ".gguf", ".safetensors", ".bin", ".json":
		return "it ends in " + ext
	}
	if dir, _, _ := strings.Cut(name, "/"); dir != "" {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return "./" + dir + " is a local directory"
		}
	}
	return ""
}

// resolveModel is serve's hook: a path that exists is used as it is; a Hub
// model id (Org/Name[@rev]) that does not read as a mistyped local path
// (localLooking; that is an error naming the missing file) is fetched into the Hugging Face cache and
// prepared with --quant auto under the default budget into
// $DRAFTD_CACHE (default the user cache dir + /draftd)/models--Org--Name/<commit>.gguf,
// once: later starts reuse that file (offline too, with HF_HUB_OFFLINE=1).
func resolveModel(ctx context.Context, arg string) (string, error) {
	if _, err := os.Stat(arg); err == nil || !hub.IsRepoID(strings.SplitN(arg, "@", 2)[0]) {
		return arg, nil // a local model (or a missing file: the loader says so)
	}
	if why := localLooking(arg); why != "" {
		return "", fmt.Errorf("%s: no such file or directory (%s, so it is taken as a local path, not a Hub id)", arg, why)
	}
	src, err := fetchModel(ctx, arg, os.Stderr, false)
	if err != nil {
		return "", err
	}
	root := os.Getenv("DRAFTD_CACHE")
	if root == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory for the prepared model (set DRAFTD_CACHE): %w", err)
		}
		root = filepath.Join(uc, "draftd")
	}
	out := filepath.Join(root, "models--"+strings.ReplaceAll(src.Repo, "/", "--"), src.Revision+".gguf")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	maxBytes, err := defaultMaxBytes()
	if err != nil {
		return "", err
	}
	if _, err := convertModel(ctx, src, out, "auto", nil, maxBytes, 0, os.Stderr); err != nil {
		return "", err
	}
	return out, nil
}

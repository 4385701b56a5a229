// draftd vocab: the token ranking a trimmed draft LM head (serve
// --draft-vocab N, FR-Spec) keeps the top of — token frequencies of the real
// tokenizer over text on this machine (Go's source tree, the package
// documentation in /usr/share/doc: the corpora of `draftd dataset`), with
// the tokenizer's special tokens listed apart so that they are always kept.
// Deterministic for the same files, flags and tokenizer. It does not load a
// model or decide N.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/draftd/draftd/internal/fileio"
	"github.com/draftd/draftd/internal/tokenizer"
	"github.com/draftd/draftd/internal/vocabrank"
)

func init() {
	register("vocab", "rank tokens by frequency in real text on this machine, for serve --draft-vocab", runVocab)
}

// vocabFile is the JSON `draftd vocab` writes and serve --draft-vocab-file
// reads (GET /v1/vocab answers it too, from the traffic serve saw).
type vocabFile = vocabrank.File

type vocabCorpus = vocabrank.Corpus

func runVocab(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("vocab", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		sources  = fs.String("source", "go,prose", "comma-separated corpora: go ($(go env GOROOT)/src, .go files) and prose (/usr/share/doc: README, NEWS, .md, .txt)")
		out      = fs.String("out", "", "output JSON file (required)")
		tokPath  = fs.String("tokenizer", defaultTokenizer, "the drafter's tokenizer: tokenizer.json, an HF directory or the GGUF model")
		exclude  = fs.String("exclude", "", "JSON Lines `file` written by draftd dataset whose source files are left out (to measure the trimmed head on unseen text)")
		maxBytes = fs.Int64("max-bytes", 1<<30, "stop each corpus after this many bytes of text")
		traffic  = fs.String("traffic", "", "a ranking `file` from a server's traffic (GET /v1/vocab): its ids rank first (what the target wrote, then the contexts sent), the corpora order the rest")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd vocab --out F.json [flags]\n\n"+
			"Counts the tokens of every file of the corpora (files in lexical order; generated Go\n"+
			"files and duplicates skipped) and writes the ids by frequency.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	srcs := strings.Split(*sources, ",")
	for _, s := range srcs {
		if s != "go" && s != "prose" {
			return clientUsageError(fs, fmt.Sprintf("--source %q: each corpus must be go or prose", s))
		}
	}
	switch {
	case *out == "":
		return clientUsageError(fs, "--out is required")
	case *maxBytes < 1:
		return clientUsageError(fs, "--max-bytes must be at least 1")
	}
	skip := map[string]bool{} // "source/relative path" of excluded files
	if *exclude != "" {
		f, err := os.Open(*exclude)
		if err != nil {
			return fmt.Errorf("vocab: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var line struct{ ID string }
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.ID == "" {
				f.Close()
				return fmt.Errorf("vocab: --exclude %s: a line without a dataset id", *exclude)
			}
			id, _, _ := strings.Cut(line.ID, "@")
			skip[id] = true
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return fmt.Errorf("vocab: --exclude %s: %w", *exclude, err)
		}
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return fmt.Errorf("vocab: %w (run `npm ci` in testdata/tokenizer, or give --tokenizer)", err)
	}
	var keys [][]int64 // the traffic's accepted and context counts, before the corpus counts
	var tf *vocabrank.Traffic
	if *traffic != "" {
		data, err := fileio.ReadFileMax(*traffic, maxVocabFileBytes)
		if err != nil {
			return fmt.Errorf("vocab: --traffic: %w", err)
		}
		var f vocabFile
		if err := json.Unmarshal(data, &f); err != nil {
			return fmt.Errorf("vocab: --traffic %s: %w", *traffic, err)
		}
		acc, ctxc, err := f.TrafficCounts(*traffic, tok.VocabSize())
		if err != nil {
			return fmt.Errorf("vocab: --traffic %w", err)
		}
		keys, tf = [][]int64{acc, ctxc}, f.Traffic
	}
	counts := make([]int64, tok.VocabSize())
	var vf vocabFile
	seen := map[[32]byte]bool{}
	for _, source := range srcs {
		dir := "/usr/share/doc"
		if source == "go" {
			b, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
			if err != nil {
				return fmt.Errorf("vocab: go env GOROOT: %v", err)
			}
			dir = filepath.Join(strings.TrimSpace(string(b)), "src")
		}
		files, err := datasetFiles(dir, source, 1)
		if err != nil {
			return fmt.Errorf("vocab: %w", err)
		}
		c := vocabCorpus{Source: source, Root: dir}
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, f)
			if skip[source+"/"+rel] {
				continue
			}
			text, err := readText(f)
			if err != nil {
				return fmt.Errorf("vocab: %w", err)
			}
			sum := sha256.Sum256(text)
			if seen[sum] || !utf8Text(text) || (source == "go" && generated(text)) {
				continue
			}
			seen[sum] = true
			for _, id := range tok.EncodePlain(string(text)) {
				counts[id]++
				vf.Tokens++
			}
			c.Files++
			c.Bytes += int64(len(text))
			if c.Bytes >= *maxBytes {
				break
			}
		}
		vf.Corpus = append(vf.Corpus, c)
	}
	classes, err := vocabrank.Classes(tok)
	if err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	ranked, err := vocabrank.Build(classes, append(keys, counts)...)
	if err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	vf.VocabSize, vf.Special, vf.Ranked, vf.Counts = ranked.VocabSize, ranked.Special, ranked.Ranked, ranked.Counts
	vf.ContextCounts, vf.CorpusCounts, vf.Traffic = ranked.ContextCounts, ranked.CorpusCounts, tf
	if tf != nil {
		vf.Tokens += tf.ContextTokens + tf.AcceptedTokens
	}
	err = fileio.WriteAtomic(*out, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		if err := json.NewEncoder(bw).Encode(&vf); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	seenIDs := 0 // in the corpora
	for id, c := range counts {
		if c > 0 && classes[id] == vocabrank.Normal {
			seenIDs++
		}
	}
	fmt.Fprintf(os.Stderr, "draftd vocab: %d tokens, %d distinct ids (of %d ranked) + %d special → %s\n", vf.Tokens, seenIDs, len(vf.Ranked), len(vf.Special), *out)
	return nil
}

// maxVocabFileBytes bounds the --draft-vocab-file serve reads: a ranking
// of a 2-million-token vocabulary (each id ≤ 8 bytes and its count ≤ 21
// with their separators) is under 60 MB; anything larger is not a file
// `draftd vocab` wrote.
const maxVocabFileBytes = 64 << 20

// draftVocabIDs reads a `draftd vocab` file and returns the ids a draft head
// of n rows keeps for a model of vocab rows: every special token, then the
// most frequent ids until n.
func draftVocabIDs(path string, n, vocab int) ([]int, error) {
	// A regular file (a FIFO would block start-up) of a ranking's size.
	data, err := fileio.ReadFileMax(path, maxVocabFileBytes)
	if errors.Is(err, fileio.ErrTooLarge) {
		return nil, fmt.Errorf("%w: not a draftd vocab ranking (those are at most %d MiB)", err, maxVocabFileBytes>>20)
	}
	if err != nil {
		return nil, err
	}
	var vf vocabFile
	if err := json.Unmarshal(data, &vf); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return vf.Keep(path, n, vocab)
}

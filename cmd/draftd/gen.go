// draftd gen: builds an evaluation dataset (docs/evaluation.md) — the target model's
// greedy continuation of each prompt — by running many prompts concurrently
// through the batching, prefix-caching engine (internal/engine) as chains of
// draft requests. It does not tokenize text (prompts are token ids) or judge
// the continuations.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/model"
)

func init() {
	register("gen", "greedy target continuations of prompts → dataset JSONL", runGen)
}

// genPrompt is one line of the prompts file.
type genPrompt struct {
	line   int
	id     json.RawMessage
	prompt []int // (promptLen) token ids
}

// genSample is one line of the output dataset.
type genSample struct {
	ID           json.RawMessage `json:"id"`
	Prompt       []int           `json:"prompt"`
	Continuation []int           `json:"continuation"`
}

// genChunk is the largest draft request gen makes (the engine's default
// MaxDraftLen).
const genChunk = engine.DefaultMaxDraftLen

func runGen(ctx context.Context, args []string) error {
	fs := newFlags("gen", "gen --model PATH --prompts FILE --out FILE [flags]", "")
	path := fs.String("model", "", "target model: a .gguf file or an HF directory (required)")
	promptsPath := fs.String("prompts", "", `prompts, JSON Lines of {"id":..., "prompt":[token ids]} (required)`)
	maxNew := fs.Int("max-new", 256, "largest number of continuation tokens per prompt")
	outPath := fs.String("out", "", "output dataset, JSON Lines of {id, prompt, continuation}; - for stdout (required)")
	tokPath := fs.String("tokenizer", "", `tokenizer for text-form prompts ({"id","messages":[{role,content}]}): tokenizer.json, its directory or a GGUF (default: the model itself)`)
	stopFlag := fs.String("stop-ids", "", "token ids that end a continuation (the stop id is kept), e.g. 151645,151643")
	threads := fs.Int("threads", 0, "kernel worker threads (0: all cores)")
	maxBatch := fs.Int("max-batch", engine.DefaultMaxBatch, "max sequences per forward step")
	kvBytes := fs.Int64("kv-cache-bytes", 0, "KV cache budget in bytes (0: a quarter of available memory, ≤ 8 GiB)")
	kvType := kvTypeFlag(fs)
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	kv, kvMsg := kvType()
	switch {
	case kvMsg != "":
		return clientUsageError(fs, kvMsg)
	case *path == "":
		return clientUsageError(fs, "--model is required")
	case *promptsPath == "":
		return clientUsageError(fs, "--prompts is required")
	case *outPath == "":
		return clientUsageError(fs, "--out is required")
	case *maxNew < 1:
		return clientUsageError(fs, fmt.Sprintf("--max-new %d must be ≥ 1", *maxNew))
	case *maxBatch < 1 || *maxBatch > engine.MaxMaxBatch:
		return clientUsageError(fs, fmt.Sprintf("--max-batch %d outside [1, %d]", *maxBatch, engine.MaxMaxBatch))
	case checkThreads(*threads) != nil:
		return clientUsageError(fs, checkThreads(*threads).Error())
	case *kvBytes < 0:
		return clientUsageError(fs, fmt.Sprintf("--kv-cache-bytes %d must not be negative", *kvBytes))
	}
	stop := map[int]bool{}
	if *stopFlag != "" {
		ids, err := parseIDs(*stopFlag)
		if err != nil {
			return fmt.Errorf("gen: --stop-ids: %w", err)
		}
		for _, id := range ids {
			stop[id] = true
		}
	}
	// Text-form prompts are rendered with the model's chat template; the
	// tokenizer is loaded only when one appears.
	var enc eval.TextEncoder
	encode := func(msgs []eval.Message) ([]int, error) {
		if enc == nil {
			src := *tokPath
			if src == "" {
				src = *path
			}
			e, err := loadTextEncoder(src)
			if err != nil {
				return nil, err
			}
			enc = e
		}
		return enc.EncodeChat(msgs)
	}
	prompts, err := readGenPrompts(*promptsPath, encode)
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if len(prompts) == 0 {
		return fmt.Errorf("gen: %s has no prompts", *promptsPath)
	}

	var m *model.Model
	err = interruptible(ctx, func() (err error) {
		m, err = model.Load(*path, model.Options{Threads: *threads, KV: kv})
		return err
	})
	if err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	defer m.Close()
	for _, p := range prompts {
		if err := checkGenPrompt(m, p); err != nil {
			return fmt.Errorf("gen: %s line %d: %w", *promptsPath, p.line, err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, err := engine.New(m, engine.Options{MaxBatch: *maxBatch, KVCacheBytes: *kvBytes, MaxDraftLen: genChunk, Logger: log})
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())

	var out io.Writer = os.Stdout
	if *outPath != "-" {
		f, err := os.Create(*outPath)
		if err != nil {
			return fmt.Errorf("gen: %w", err)
		}
		defer f.Close()
		out = f
	}
	w := &orderedWriter{w: bufio.NewWriter(out), pending: make([]*genSample, len(prompts))}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan int)
	var tokens atomic.Int64
	var wg sync.WaitGroup
	// Two chains per batch slot keep the batch full while a chain is
	// between requests; at most MaxQueue are ever waiting.
	for range min(2**maxBatch, engine.DefaultMaxQueue, len(prompts)) {
		wg.Go(func() {
			for i := range jobs {
				cont, err := continuePrompt(ctx, eng, m.MaxContext, prompts[i].prompt, *maxNew, stop)
				if err != nil {
					cancel(fmt.Errorf("line %d: %w", prompts[i].line, err))
					return
				}
				tokens.Add(int64(len(cont)))
				if err := w.put(i, &genSample{ID: prompts[i].id, Prompt: prompts[i].prompt, Continuation: cont}); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	start := time.Now()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
feed:
	for i := range prompts {
		for {
			select {
			case jobs <- i:
				continue feed
			case <-ctx.Done():
				break feed
			case <-progress.C:
				fmt.Fprintf(os.Stderr, "draftd gen: %d/%d prompts, %d tokens, %.1f tokens/s\n",
					w.written(), len(prompts), tokens.Load(), float64(tokens.Load())/time.Since(start).Seconds())
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("gen: stopped after writing %d of %d samples: %w", w.written(), len(prompts), err)
	}
	if err := w.flush(); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	s := eng.Stats()
	fmt.Fprintf(os.Stderr, "draftd gen: %d samples, %d tokens in %.1fs (%.1f tokens/s; %d forward steps, %d tokens served from the prefix cache)\n",
		len(prompts), tokens.Load(), time.Since(start).Seconds(), float64(tokens.Load())/time.Since(start).Seconds(), s.Steps, s.CachedTokens)
	return nil
}

// continuePrompt generates the greedy continuation of prompt as a chain of
// engine requests of up to genChunk tokens; each request after the first
// finds all but its last token in the prefix cache. It stops after a stop
// id (kept), at maxNew tokens or at the model's maximum context.
func continuePrompt(ctx context.Context, eng *engine.Engine, maxContext int, prompt []int, maxNew int, stop map[int]bool) ([]int, error) {
	seq := append(make([]int, 0, len(prompt)+maxNew), prompt...)
	for len(seq)-len(prompt) < maxNew && len(seq) < maxContext {
		n := min(genChunk, maxNew-(len(seq)-len(prompt)))
		res, err := eng.Draft(ctx, seq, n)
		for errors.Is(err, engine.ErrQueueFull) { // cannot happen with ≤ MaxQueue chains; be safe
			time.Sleep(10 * time.Millisecond)
			res, err = eng.Draft(ctx, seq, n)
		}
		if err != nil {
			return nil, err
		}
		for i, id := range res.Draft {
			if stop[id] {
				return append(seq, res.Draft[:i+1]...)[len(prompt):], nil
			}
		}
		seq = append(seq, res.Draft...)
		if len(res.Draft) < n { // the maximum context was reached
			break
		}
	}
	return seq[len(prompt):], nil
}

// readGenPrompts reads the prompts file: one JSON object per non-blank line.
// Text-form lines ("messages") are turned into ids by encodeChat.
func readGenPrompts(path string, encodeChat func([]eval.Message) ([]int, error)) ([]genPrompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []genPrompt
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for lineNo := 1; sc.Scan(); lineNo++ {
		data := bytes.TrimSpace(sc.Bytes())
		if len(data) == 0 {
			continue
		}
		var l struct {
			ID       json.RawMessage `json:"id"`
			Prompt   *[]int          `json:"prompt"`
			Messages []eval.Message  `json:"messages"`
		}
		if err := json.Unmarshal(data, &l); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, lineNo, err)
		}
		if l.Prompt != nil && l.Messages != nil {
			return nil, fmt.Errorf(`%s line %d: give "prompt" (token ids) or "messages" (text), not both`, path, lineNo)
		}
		if l.Prompt == nil {
			if l.Messages == nil {
				return nil, fmt.Errorf(`%s line %d: missing "prompt" (an array of token ids) or "messages" (text)`, path, lineNo)
			}
			ids, err := encodeChat(l.Messages)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, lineNo, err)
			}
			l.Prompt = &ids
		}
		id := l.ID
		if len(id) == 0 || string(id) == "null" {
			id = json.RawMessage(strconv.Quote(strconv.Itoa(lineNo)))
		}
		out = append(out, genPrompt{line: lineNo, id: append(json.RawMessage(nil), id...), prompt: *l.Prompt})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func checkGenPrompt(m *model.Model, p genPrompt) error {
	if len(p.prompt) == 0 {
		return errors.New("empty prompt")
	}
	if len(p.prompt) >= m.MaxContext {
		return fmt.Errorf("prompt of %d tokens leaves no room in the model's maximum context of %d", len(p.prompt), m.MaxContext)
	}
	for i, id := range p.prompt {
		if id < 0 || id >= m.Vocab {
			return fmt.Errorf("prompt id %d at index %d is outside the vocabulary [0, %d)", id, i, m.Vocab)
		}
	}
	return nil
}

// orderedWriter writes samples in input order as they complete.
type orderedWriter struct {
	mu      sync.Mutex
	w       *bufio.Writer
	pending []*genSample // (prompts) finished, not yet written
	next    int          // index of the next sample to write
	n       atomic.Int64
}

func (o *orderedWriter) put(i int, s *genSample) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pending[i] = s
	for o.next < len(o.pending) && o.pending[o.next] != nil {
		line, err := json.Marshal(o.pending[o.next])
		if err != nil {
			return err
		}
		line = append(line, '\n')
		if _, err := o.w.Write(line); err != nil {
			return err
		}
		o.pending[o.next] = nil
		o.next++
		o.n.Add(1)
	}
	return o.w.Flush()
}

func (o *orderedWriter) written() int64 { return o.n.Load() }

func (o *orderedWriter) flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Flush()
}

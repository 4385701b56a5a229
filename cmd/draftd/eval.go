// draftd eval: the replay client of docs/evaluation.md. It reads a dataset, replays it
// against a running drafter (draftd's POST /draft or llama-server's
// POST /completion), and prints/writes τ, acceptance and latency. It is not
// the server and starts none; the measuring lives in internal/eval.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("eval", "replay a dataset against a drafter and report acceptance (τ) and latency", runEval)
}

func runEval(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var rawURLs []string
	fs.Func("url", "base URL of the drafter, http://HOST:PORT (required; repeat it to spread conversations over replicas by their first 16 ids)", func(s string) error {
		rawURLs = append(rawURLs, s)
		return nil
	})
	var (
		dataPath    = fs.String("data", "", "dataset, JSON Lines of {id,prompt,continuation} or {id,messages,continuation_text} (required)")
		concurrency = fs.Int("concurrency", 32, "samples replayed at once")
		n           = fs.Int("n", 16, "draft tokens asked per request")
		timeout     = fs.Duration("timeout", 30*time.Second, "per-request timeout; a request that takes longer counts as a failure (empty draft)")
		limit       = fs.Int("limit", 0, "replay only the first K samples (0 = all)")
		project     = fs.Int64("project-tokens", 0, "also project the serving time to this many continuation tokens")
		jsonPath    = fs.String("json", "", "write the report as one JSON object to this file")
		plotPath    = fs.String("plot", "", "draw the acceptance histogram and per-position rates to this file (.png, .svg, .pdf)")
		backend     = fs.String("backend", eval.BackendDraftd, "server kind: draftd (POST /draft) or llama-server (POST /completion)")
		strategy    = fs.String("strategy", "", "drafting strategy named in every request (draftd backend): "+strings.Join(draft.Names, ", ")+"; empty: the server's --strategy")
		tokPath     = fs.String("tokenizer", "", "tokenizer for text-form samples: tokenizer.json, its model directory, or a GGUF file")
		protocol    = fs.String("protocol", eval.ProtocolFull, "how drafts are asked (draftd only): full (POST /draft, whole context), session (the context once, then accepted+bonus), batch (one POST /v1/drafts per round of the samples in flight, session items)")
		clipN       = fs.Bool("clip-n", false, "ask at most the tokens the continuation has left after the step's bonus token (min(n, remaining − 1)), as a target that stops at max_tokens uses no more; a step with one token left sends no request (as vLLM's and llama.cpp's draftd proposers do)")
		targetLat   = fs.Duration("target-latency", 0, "wait this long after each draft (each round for --protocol batch), as the target's verification would")
		minConf     = fs.Float64("min-confidence", 0, "confidence bound sent with every request (draftd backend; \"min_confidence\" of docs/protocol.md): each draft stops before its first token whose drafter probability is below it; (0, 1], 0: none sent")
		confSignal  = fs.String("confidence-signal", "", fmt.Sprintf("confidence signal sent with every request (draftd backend; \"confidence_signal\" of docs/protocol.md): %s or %s; \"\": none sent (the server's --confidence-signal)", engine.SignalTop1, engine.SignalChain))
		confOut     = fs.String("confidences-out", "", "ask every draft token's confidence and write one JSON line per draft token to this `file`: sample, step, position, confidence, accepted (draftd backend, --protocol full or session; scripts/confidence calibrate prints the calibration table from it)")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd eval --url http://HOST:PORT --data data.jsonl [flags]\n\n"+
			"Replays each sample as a speculative-decoding loop would (docs/evaluation.md) and reports\n"+
			"τ = tokens / steps, the accepted-length histogram, acceptance by draft position\n"+
			"(accepted at position i / drafts that had a token at i), latency and throughput.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case len(rawURLs) == 0:
		return clientUsageError(fs, "--url is required")
	case *dataPath == "":
		return clientUsageError(fs, "--data is required")
	case *concurrency < 1:
		return clientUsageError(fs, "--concurrency must be at least 1")
	case *n < 1:
		return clientUsageError(fs, "--n must be at least 1")
	case *limit < 0:
		return clientUsageError(fs, "--limit must not be negative")
	case *project < 0:
		return clientUsageError(fs, "--project-tokens must not be negative")
	case *protocol != eval.ProtocolFull && *protocol != eval.ProtocolSession && *protocol != eval.ProtocolBatch:
		return clientUsageError(fs, "--protocol must be full, session or batch")
	case *protocol != eval.ProtocolFull && (*backend != eval.BackendDraftd || len(rawURLs) > 1):
		return clientUsageError(fs, "--protocol session and batch need --backend draftd and one --url (a proxy routes sessions)")
	case *targetLat < 0 || *targetLat > time.Minute:
		return clientUsageError(fs, "--target-latency must be in [0, 1m]")
	case *strategy != "" && *backend != eval.BackendDraftd:
		return clientUsageError(fs, "--strategy is for the draftd backend only")
	case *strategy != "" && !slices.Contains(draft.Names, *strategy):
		return clientUsageError(fs, fmt.Sprintf("--strategy %q: want one of %s", *strategy, strings.Join(draft.Names, ", ")))
	case *strategy != "" && *protocol != eval.ProtocolFull:
		return clientUsageError(fs, "--strategy is for --protocol full only")
	case *clipN && *protocol == eval.ProtocolBatch:
		return clientUsageError(fs, "--clip-n is for --protocol full and session")
	case !(*minConf >= 0 && *minConf <= 1):
		return clientUsageError(fs, fmt.Sprintf("--min-confidence %v outside [0, 1]", *minConf))
	case *minConf > 0 && *backend != eval.BackendDraftd:
		return clientUsageError(fs, "--min-confidence is for the draftd backend only")
	case *confSignal != "" && !slices.Contains(engine.ConfidenceSignals, *confSignal):
		return clientUsageError(fs, fmt.Sprintf("--confidence-signal %q is none of %q", *confSignal, engine.ConfidenceSignals))
	case *confSignal != "" && *backend != eval.BackendDraftd:
		return clientUsageError(fs, "--confidence-signal is for the draftd backend only")
	case *confOut != "" && (*backend != eval.BackendDraftd || len(rawURLs) > 1 || *protocol == eval.ProtocolBatch):
		return clientUsageError(fs, "--confidences-out needs --backend draftd, one --url and --protocol full or session")
	}
	hc := eval.NewHTTPClient(*concurrency)
	var bases []string
	var routed eval.Routed
	for _, raw := range rawURLs {
		base, err := eval.NormalizeURL(raw)
		if err != nil {
			return err
		}
		d, err := eval.NewDrafter(*backend, hc, base)
		if err != nil {
			return err
		}
		if dc, ok := d.(*eval.DraftdClient); ok {
			dc.Strategy, dc.MinConfidence, dc.ConfidenceSignal = *strategy, *minConf, *confSignal
		}
		bases, routed = append(bases, base), append(routed, d)
	}
	base := bases[0]
	var drafter eval.Drafter = routed[0]
	if len(routed) > 1 {
		drafter = routed
	}

	var enc eval.TextEncoder
	var err error
	if *tokPath != "" {
		if enc, err = loadTextEncoder(*tokPath); err != nil {
			return err
		}
	}
	samples, err := eval.LoadDataset(*dataPath, enc, *limit)
	if err != nil {
		return err
	}

	for _, b := range bases {
		if err := eval.CheckHealth(ctx, hc, b); err != nil {
			return err
		}
	}
	var serverInfo json.RawMessage
	if *backend == eval.BackendDraftd {
		info, err := eval.FetchInfo(ctx, hc, base)
		if err != nil {
			fmt.Fprintln(os.Stderr, "draftd eval: warning:", err)
		}
		serverInfo = info.Raw
	}

	var metricsBefore eval.Metrics
	if *backend == eval.BackendDraftd && len(bases) == 1 {
		metricsBefore, _ = eval.FetchMetrics(ctx, hc, base) // nil: no pre-draft part in the report
	}
	var total int
	for _, s := range samples {
		total += len(s.Continuation)
	}
	ropt := eval.ReplayOptions{
		N: *n, Concurrency: *concurrency, Timeout: *timeout,
		Protocol: *protocol, TargetLatency: *targetLat, ClipN: *clipN, SessionPrefix: fmt.Sprintf("eval-%x-", time.Now().UnixNano()),
	}
	var rows *confidenceRows
	if *confOut != "" {
		if rows, err = newConfidenceRows(*confOut); err != nil {
			return err
		}
		ropt.Confidences = rows.add
	}
	bar := eval.NewProgress(total, fmt.Sprintf("replaying %d samples", len(samples)))
	ropt.Progress = bar.Add
	report, err := eval.Replay(ctx, drafter, samples, ropt)
	bar.Done()
	if rows != nil {
		if cerr := rows.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if report == nil {
		return err
	}
	report.MinConfidence, report.ConfidenceSignal = *minConf, *confSignal
	report.Backend, report.URL, report.Data, report.ServerInfo = *backend, strings.Join(bases, ","), *dataPath, serverInfo
	if dc, ok := routed[0].(*eval.DraftdClient); ok && len(routed) == 1 {
		report.AddWire(dc.Wire)
	}
	if metricsBefore != nil {
		if after, merr := eval.FetchMetrics(ctx, hc, base); merr == nil {
			report.Predraft = eval.PredraftDelta(metricsBefore, after)
		}
	}
	report.Project(*project)
	if err != nil {
		fmt.Fprintf(os.Stderr, "draftd eval: interrupted; the report covers %d of %d samples\n", report.Samples, report.SamplesTotal)
	}
	if werr := report.WriteText(os.Stdout); werr != nil {
		return werr
	}
	if *jsonPath != "" {
		if werr := eval.WriteJSON(*jsonPath, report); werr != nil {
			return werr
		}
	}
	if *plotPath != "" {
		if werr := eval.WritePlot(report, *plotPath); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("eval interrupted: %w", err)
	}
	return nil
}

// confidenceRows writes --confidences-out: one JSON line per draft token.
type confidenceRows struct {
	mu  sync.Mutex
	f   *os.File
	w   *bufio.Writer
	err error
}

func newConfidenceRows(path string) (*confidenceRows, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--confidences-out: %w", err)
	}
	return &confidenceRows{f: f, w: bufio.NewWriter(f)}, nil
}

func (c *confidenceRows) add(r eval.ConfidenceRow) {
	b, _ := json.Marshal(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		_, c.err = c.w.Write(append(b, '\n'))
	}
}

func (c *confidenceRows) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := errors.Join(c.err, c.w.Flush(), c.f.Close())
	if err != nil {
		return fmt.Errorf("--confidences-out: %w", err)
	}
	return nil
}

// loadTextEncoder loads the tokenizer (tokenizer.json, its directory, or a
// GGUF file) for text-form samples.
func loadTextEncoder(path string) (eval.TextEncoder, error) {
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	return evalTokenizer{tok}, nil
}

// evalTokenizer adapts *tokenizer.Tokenizer to eval.TextEncoder. The prompt
// is the chat template with the generation prompt appended and
// enable_thinking left at the template's default (true for Qwen3), as
// apply_chat_template(add_generation_prompt=True) renders it; the
// continuation text is encoded with special tokens recognised, so an
// "<|im_end|>" the target wrote becomes its id.
type evalTokenizer struct{ tok *tokenizer.Tokenizer }

func (e evalTokenizer) EncodeChat(msgs []eval.Message) ([]int, error) {
	tm := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		tm[i] = tokenizer.Message{Role: m.Role, Content: m.Content}
	}
	return e.tok.EncodeChat(tm, true, true)
}

func (e evalTokenizer) Encode(text string) ([]int, error) { return e.tok.Encode(text), nil }

// draftd bench: a synthetic load against a running drafter (draftd or
// llama-server) that needs no target model and no dataset: conversations of
// random tokens that grow by a random number of accepted draft tokens plus a
// bonus token per step. It reports serving cost (draft tokens/s, requests/s,
// latency), not acceptance; it is not the server and starts none.

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/draftd/draftd/internal/eval"
)

func init() {
	register("bench", "synthetic load against a drafter: draft tokens/s and latency", runBench)
}

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		rawURL      = fs.String("url", "", "base URL of the drafter, http://HOST:PORT (required)")
		concurrency = fs.Int("concurrency", 32, "conversations in flight")
		requests    = fs.Int("requests", 512, "draft requests in total, spread over the conversations")
		contextLen  = fs.Int("context-len", 512, "random tokens that open each conversation")
		acceptMean  = fs.Float64("accept-mean", 4.6, "mean accepted draft tokens per step (geometric, clipped to the draft)")
		n           = fs.Int("n", 16, "draft tokens asked per request")
		vocab       = fs.Int("vocab", 0, "token ids are drawn from [0, vocab); 0 = the server's vocab_size (draftd only)")
		seed        = fs.Uint64("seed", 1, "random seed of the conversations and acceptance draws")
		timeout     = fs.Duration("timeout", 30*time.Second, "per-request timeout; a request that takes longer counts as a failure")
		backend     = fs.String("backend", eval.BackendDraftd, "server kind: draftd (POST /draft) or llama-server (POST /completion)")
		jsonPath    = fs.String("json", "", "write the report as one JSON object to this file")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd bench --url http://HOST:PORT [flags]\n\n"+
			"Each conversation opens with --context-len random token ids; each step asks for a\n"+
			"draft of --n tokens, accepts k of them (each position accepted with probability\n"+
			"A/(1+A) given the ones before, so E[k] = A before clipping to the draft), appends\n"+
			"them and one random bonus token, and goes on. Reports draft tokens/s (returned\n"+
			"draft tokens / wall time), requests/s, latency p50/p90/p99 and failures.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case *rawURL == "":
		return clientUsageError(fs, "--url is required")
	case *concurrency < 1:
		return clientUsageError(fs, "--concurrency must be at least 1")
	case *requests < 1:
		return clientUsageError(fs, "--requests must be at least 1")
	case *contextLen < 1:
		return clientUsageError(fs, "--context-len must be at least 1")
	case *acceptMean < 0:
		return clientUsageError(fs, "--accept-mean must not be negative")
	case *n < 1:
		return clientUsageError(fs, "--n must be at least 1")
	case *vocab < 0:
		return clientUsageError(fs, "--vocab must not be negative")
	case *vocab == 0 && *backend != eval.BackendDraftd:
		return clientUsageError(fs, "--vocab is required with --backend "+*backend)
	}
	base, err := eval.NormalizeURL(*rawURL)
	if err != nil {
		return err
	}
	hc := eval.NewHTTPClient(*concurrency)
	drafter, err := eval.NewDrafter(*backend, hc, base)
	if err != nil {
		return err
	}
	if err := eval.CheckHealth(ctx, hc, base); err != nil {
		return err
	}
	maxContext := 0
	if *backend == eval.BackendDraftd {
		info, err := eval.FetchInfo(ctx, hc, base)
		switch {
		case err != nil && *vocab == 0:
			return fmt.Errorf("%w (or pass --vocab)", err)
		case err != nil:
			fmt.Fprintln(os.Stderr, "draftd bench: warning:", err)
		case *vocab > info.VocabSize:
			return fmt.Errorf("--vocab %d is larger than the server's vocab_size %d", *vocab, info.VocabSize)
		case *vocab == 0:
			*vocab = info.VocabSize
		}
		maxContext = info.MaxContext
	}

	bar := eval.NewProgress(*requests, fmt.Sprintf("bench, %d requests", *requests))
	report, err := eval.Bench(ctx, drafter, eval.BenchOptions{
		Concurrency: *concurrency, Requests: *requests, ContextLen: *contextLen, N: *n,
		AcceptMean: *acceptMean, Vocab: *vocab, MaxContext: maxContext, Seed: *seed,
		Timeout: *timeout, Progress: bar.Add,
	})
	bar.Done()
	if report == nil {
		return err
	}
	report.Backend, report.URL = *backend, base
	if err != nil {
		fmt.Fprintf(os.Stderr, "draftd bench: interrupted after %d requests\n", report.Requests)
	}
	if werr := report.WriteText(os.Stdout); werr != nil {
		return werr
	}
	if *jsonPath != "" {
		if werr := eval.WriteJSON(*jsonPath, report); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("bench interrupted: %w", err)
	}
	return nil
}

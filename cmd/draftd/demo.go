// draftd demo: the whole loop of issue 3 offline, on a fresh clone, in
// seconds. It builds a tiny random Qwen3 TARGET and a DRAFTER that is the
// same model truncated to its first layers (weights are seeded by tensor
// name, so the drafter's embedding and layers are the target's: a real,
// smaller model whose drafts are often accepted), has the target write a
// small dataset of greedy continuations, serves the drafter in-process on a
// free loopback port, replays the dataset against it with the eval client,
// prints the report and shuts the server down. Its models are random: the
// numbers show the machinery, not the quality of a real drafter.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/fileio"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/server"
	"github.com/draftd/draftd/internal/testmodel"
)

func init() {
	register("demo", "offline end-to-end demo: tiny target + drafter, dataset, server, replay, report", runDemo)
}

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		dir          = fs.String("dir", filepath.Join(os.TempDir(), "draftd-demo"), "where the models, dataset and report are kept (built when missing)")
		threads      = fs.Int("threads", 0, "kernel worker threads (0: all cores)")
		targetLayers = fs.Int("target-layers", 8, "layers of the target model")
		draftLayers  = fs.Int("draft-layers", 4, "layers of the drafter (the target's first ones)")
		decay        = fs.Float64("decay", 0.6, "residual gain of layer i is decay^i (0: none), so the truncated drafter approximates the target")
		samples      = fs.Int("samples", 16, "dataset samples")
		tokens       = fs.Int("tokens", 64, "continuation tokens per sample")
		n            = fs.Int("n", 16, "draft tokens asked per request")
		concurrency  = fs.Int("concurrency", 32, "samples replayed at once")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd demo [--dir DIR] [--threads N] [flags]\n\n"+
			"Builds a tiny random target and a truncated drafter, generates a dataset with the\n"+
			"target, serves the drafter on a free loopback port, replays the dataset and\n"+
			"prints τ and latency. Offline; takes seconds.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case *targetLayers < 1 || *draftLayers < 1 || *draftLayers >= *targetLayers:
		return clientUsageError(fs, "want 1 ≤ --draft-layers < --target-layers")
	case *samples < 1 || *tokens < 1 || *n < 1 || *concurrency < 1:
		return clientUsageError(fs, "--samples, --tokens, --n and --concurrency must be at least 1")
	case *tokens > 160:
		return clientUsageError(fs, "--tokens must be at most 160 (the tiny models' context is 256)")
	case *n > engine.MaxMaxDraftLen:
		return clientUsageError(fs, fmt.Sprintf("--n %d outside [1, %d]", *n, engine.MaxMaxDraftLen))
	case checkThreads(*threads) != nil:
		return clientUsageError(fs, checkThreads(*threads).Error())
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "draftd demo: "+format+"\n", a...) }
	start := time.Now()

	// 1. Models.
	spec := testmodel.Tiny(model.ArchQwen3, dtype.Q8_0)
	spec.Decay = *decay
	tspec, dspec := spec, spec
	tspec.Layers, dspec.Layers = *targetLayers, *draftLayers
	tspec.Name = fmt.Sprintf("demo-target-%s-l%d-d%g", spec.Name, tspec.Layers, spec.Decay)
	dspec.Name = fmt.Sprintf("demo-drafter-%s-l%d-d%g", spec.Name, dspec.Layers, spec.Decay)
	targetPath := filepath.Join(*dir, tspec.Name+".gguf")
	draftPath := filepath.Join(*dir, dspec.Name+".gguf")
	for _, m := range []struct {
		spec testmodel.Spec
		path string
	}{{tspec, targetPath}, {dspec, draftPath}} {
		built, err := buildIfMissing(m.path, func(p string) error { return m.spec.WriteGGUF(p) })
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		say("%s %s", map[bool]string{true: "built", false: "using"}[built], m.path)
	}

	// 2. Dataset: the target's greedy continuations of random prompts.
	dataPath := filepath.Join(*dir, fmt.Sprintf("data-%s-%dx%d.jsonl", tspec.Name, *samples, *tokens))
	built, err := buildIfMissing(dataPath, func(p string) error {
		return writeDemoData(p, targetPath, *threads, *samples, *tokens)
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	say("%s %s", map[bool]string{true: "generated", false: "using"}[built], dataPath)
	data, err := eval.LoadDataset(dataPath, nil, 0)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	// 3. The drafter, served in-process on a free loopback port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	base := "http://" + ln.Addr().String()
	sctx, stopServer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServer()
	served := make(chan error, 1)
	tServe := time.Now()
	go func() {
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		served <- server.Run(sctx, ln, server.Config{
			Name: draftPath, DraftLen: *n, Logger: logger,
			Open: openBackend(backendOptions{
				ModelPath: draftPath, Model: model.Options{Threads: *threads},
				Engine: engine.Options{MaxDraftLen: max(*n, engine.DefaultMaxDraftLen), KVCacheBytes: 256 << 20, Logger: logger},
			}),
		})
	}()
	hc := eval.NewHTTPClient(*concurrency)
	defer hc.CloseIdleConnections()
	if err := waitHealthy(ctx, hc, base, served); err != nil {
		stopServer()
		return fmt.Errorf("demo: %w", err)
	}
	say("serving %s at %s (healthy after %v)", filepath.Base(draftPath), base, time.Since(tServe).Round(time.Millisecond))
	info, err := eval.FetchInfo(ctx, hc, base)
	if err != nil {
		say("warning: %v", err)
	}

	// 4. Replay.
	var total int
	for _, s := range data {
		total += len(s.Continuation)
	}
	bar := eval.NewProgress(total, fmt.Sprintf("replaying %d samples", len(data)))
	client, _ := eval.NewDrafter(eval.BackendDraftd, hc, base)
	report, rerr := eval.Replay(ctx, client, data, eval.ReplayOptions{N: *n, Concurrency: *concurrency, Timeout: 30 * time.Second, Progress: bar.Add})
	bar.Done()

	// 5. Shut down, then report.
	stopServer()
	if err := <-served; err != nil {
		return fmt.Errorf("demo: server: %w", err)
	}
	if report == nil {
		return fmt.Errorf("demo: %w", rerr)
	}
	report.Backend, report.URL, report.Data, report.ServerInfo = eval.BackendDraftd, base, dataPath, info.Raw
	fmt.Printf("target  %s (%d layers)\ndrafter %s (its first %d layers)\n\n",
		filepath.Base(targetPath), tspec.Layers, filepath.Base(draftPath), dspec.Layers)
	if err := report.WriteText(os.Stdout); err != nil {
		return err
	}
	jsonPath := filepath.Join(*dir, "report.json")
	if err := eval.WriteJSON(jsonPath, report); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Printf("\nreport: %s\nserver stopped cleanly; demo took %v\n", jsonPath, time.Since(start).Round(time.Millisecond))
	if rerr != nil {
		return fmt.Errorf("demo: replay interrupted: %w", rerr)
	}
	if report.Failures > 0 {
		return fmt.Errorf("demo: %d of %d requests failed (first: %s)", report.Failures, report.Requests, report.FirstError)
	}
	return nil
}

// buildIfMissing runs build(path) unless path exists, and reports whether it
// built. The builders write atomically (temporary file, then rename), so an
// interrupted demo never leaves a partial file to be reused.
func buildIfMissing(path string, build func(path string) error) (bool, error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, build(path)
}

// writeDemoData writes samples lines of {"id","prompt","continuation"}: the
// target's greedy continuation (tokens long) of seeded random prompts.
func writeDemoData(path, targetPath string, threads, samples, tokens int) error {
	m, err := model.Load(targetPath, model.Options{Threads: threads})
	if err != nil {
		return err
	}
	defer m.Close()
	return fileio.WriteAtomic(path, func(out io.Writer) error {
		w := bufio.NewWriter(out)
		r := rand.New(rand.NewPCG(42, 42))
		enc := json.NewEncoder(w)
		for i := range samples {
			prompt := make([]int, 8+r.IntN(40))
			for j := range prompt {
				prompt[j] = r.IntN(m.Vocab)
			}
			cont, err := m.Generate(prompt, tokens)
			if err != nil {
				return err
			}
			line := struct {
				ID           string `json:"id"`
				Prompt       []int  `json:"prompt"`
				Continuation []int  `json:"continuation"`
			}{fmt.Sprintf("demo-%02d", i), prompt, cont}
			if err := enc.Encode(line); err != nil {
				return err
			}
		}
		return w.Flush()
	})
}

// waitHealthy polls GET /health until it answers 200, the server stops, or
// a minute passes.
func waitHealthy(ctx context.Context, hc *http.Client, base string, served <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/health", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-served:
			return fmt.Errorf("server stopped before it was healthy: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not healthy after a minute")
		}
	}
}

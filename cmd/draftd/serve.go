// draftd serve: the drafter service of DESIGN §1 on one address. This file
// only turns flags into a server.Config and a logger; listening, loading,
// the protocol and graceful shutdown live in internal/server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/draftd/draftd/internal/server"
)

func init() {
	register("serve", "serve drafts over HTTP (POST /draft, /health, /metrics, /v1/info)", runServe)
}

func runServe(ctx context.Context, args []string) error {
	d := server.Defaults
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		path       = fs.String("model", "", "draft model: a .gguf file, an HF directory, or a Hub id Org/Name[@rev] prepared on first start (required)")
		addr       = fs.String("addr", "127.0.0.1:8080", "listen address")
		draftLen   = fs.Int("draft-len", d.DraftLen, "draft tokens when a request gives no n")
		maxDraft   = fs.Int("max-draft-len", d.MaxDraftLen, "largest n a request may ask")
		threads    = fs.Int("threads", 0, "kernel worker threads (0: all cores)")
		maxBatch   = fs.Int("max-batch", d.MaxBatch, "sequences per engine step")
		kvBytes    = fs.Int64("kv-cache-bytes", 0, "KV cache budget in bytes (0: sized from free memory)")
		maxQueue   = fs.Int("max-queue", d.MaxQueue, "requests waiting for a batch slot before 503")
		maxBody    = fs.Int64("max-body-bytes", d.MaxBodyBytes, "POST /draft body limit in bytes (413 above)")
		kvF32      = fs.Bool("kv-f32", false, "keep the KV cache in f32 instead of f16")
		logFormat  = fs.String("log-format", "text", "log format: text or json")
		logLevel   = fs.String("log-level", "info", "log level: debug (one line per request), info, warn or error")
		shutdownTO = fs.Duration("shutdown-timeout", d.ShutdownTimeout, "how long in-flight requests may take to finish on SIGINT/SIGTERM")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd serve --model PATH [flags]\n\n"+
			"Listens at once; GET /health answers 503 until the model is loaded and one\n"+
			"warm-up draft ran, then 200. SIGINT/SIGTERM stop accepting, finish in-flight\n"+
			"requests and exit 0.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	if *path == "" {
		return clientUsageError(fs, "--model is required")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return clientUsageError(fs, fmt.Sprintf("--log-level %q: want debug, info, warn or error", *logLevel))
	}
	hopt := &slog.HandlerOptions{Level: level}
	var logger *slog.Logger
	switch strings.ToLower(*logFormat) {
	case "text":
		logger = slog.New(slog.NewTextHandler(os.Stderr, hopt))
	case "json":
		logger = slog.New(slog.NewJSONHandler(os.Stderr, hopt))
	default:
		return clientUsageError(fs, fmt.Sprintf("--log-format %q: want text or json", *logFormat))
	}
	cfg := server.Config{
		ModelPath: *path, Resolve: resolveModel, Threads: *threads, KVF32: *kvF32,
		DraftLen: *draftLen, MaxDraftLen: *maxDraft, MaxBatch: *maxBatch, MaxQueue: *maxQueue,
		KVCacheBytes: *kvBytes, MaxBodyBytes: *maxBody, ShutdownTimeout: *shutdownTO, Logger: logger,
	}
	for _, c := range []struct {
		bad bool
		msg string
	}{
		{*maxDraft < 1, "--max-draft-len must be at least 1"},
		{*draftLen < 1 || *draftLen > *maxDraft, "--draft-len must be in [1, --max-draft-len]"},
		{*maxBatch < 1, "--max-batch must be at least 1"},
		{*maxQueue < 1, "--max-queue must be at least 1"},
		{*kvBytes < 0, "--kv-cache-bytes must not be negative"},
		{*maxBody < 64, "--max-body-bytes must be at least 64"},
		{*shutdownTO <= 0, "--shutdown-timeout must be positive"},
	} {
		if c.bad {
			return clientUsageError(fs, c.msg)
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := server.Run(ctx, ln, cfg); err != nil {
		if errors.Is(err, server.ErrConfig) {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

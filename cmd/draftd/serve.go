// draftd serve: the drafter service of docs/protocol.md on one address. This file
// turns flags into a backend (backend.go) and a server.Config, and checks
// every flag against its documented range; listening, the protocol and
// graceful shutdown live in internal/server.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/server"
	"github.com/draftd/draftd/internal/session"
)

func init() {
	register("serve", "serve drafts over HTTP (POST /draft, POST /v1/drafts, sessions, /health, /metrics, /v1/info)", runServe)
}

// maxThreads is the largest --threads: more workers than 4 per core only
// thrash (100000 of them never finish a step).
func maxThreads() int { return 4 * runtime.NumCPU() }

// checkThreads checks a --threads value.
func checkThreads(n int) error {
	if n < 0 || n > maxThreads() {
		return fmt.Errorf("--threads %d outside [0, %d] (0: all cores; at most 4 per core)", n, maxThreads())
	}
	return nil
}

// Bounds of the serve flags that are not bounds of a server or engine
// option.
const (
	minKVCacheBytes = 1 << 20
	maxKVCacheBytes = 1 << 40
)

const serveDoc = `Listens at once; GET /health answers 503 until the model is loaded and one
warm-up draft ran, then 200. SIGINT, SIGTERM and SIGHUP start the drain: new
connections are refused, requests arriving on open connections get 503
shutting_down with Connection: close, in-flight requests finish (their
answers carry Connection: close); then serve exits 0. If the drain takes
longer than --shutdown-timeout, what remains is cut off and serve exits 1.
A second signal exits 1 at once. A signal while the model loads exits at once.
A client whose connection ends before its answer (reset, or closed normally)
cancels its queued or running request, logged and counted as status 499.
Every flag's valid range is in its description; a value outside it is a
usage error (exit 2) — for a range that depends on the model (its maximum
context), once the model is loaded. Once loaded, serve sets the Go memory
limit from --kv-cache-bytes, --max-inflight-body-bytes, --max-queue,
--max-batch and the model (logged as "memory limit"; a GOMEMLIMIT in the
environment is kept instead).`

func runServe(ctx context.Context, args []string) error {
	d := server.Defaults
	fs := newFlags("serve", "serve --model PATH [flags]", serveDoc)
	var (
		path       = fs.String("model", "", "draft model: a .gguf file, an HF directory, or a Hub id Org/Name[@rev] prepared on first start (required)")
		addr       = fs.String("addr", "127.0.0.1:8080", "listen address (port 0: any free port, logged)")
		draftLen   = fs.Int("draft-len", d.DraftLen, "draft tokens when a request gives no n; [1, --max-draft-len]")
		maxDraft   = fs.Int("max-draft-len", engine.DefaultMaxDraftLen, fmt.Sprintf("largest n a request may ask; [1, %d]", engine.MaxMaxDraftLen))
		threads    = fs.Int("threads", 0, fmt.Sprintf("kernel worker threads; [0, 4×cores = %d], 0: all cores", maxThreads()))
		maxBatch   = fs.Int("max-batch", engine.DefaultMaxBatch, fmt.Sprintf("sequences per engine step; [1, %d]", engine.MaxMaxBatch))
		kvBytes    = fs.Int64("kv-cache-bytes", 0, fmt.Sprintf("memory budget in bytes of the KV cache and the sessions (%d × --max-session-tokens + %d × --max-sessions of it is set aside for sessions, the KV cache gets the rest, at least %d); 0 (a quarter of free memory, ≤ 8 GiB) or [%d, %d]", session.MaxBytes(0, 1), session.MaxBytes(1, 0), minKVCacheBytes, minKVCacheBytes, int64(maxKVCacheBytes)))
		maxQueue   = fs.Int("max-queue", engine.DefaultMaxQueue, fmt.Sprintf("drafts waiting for a batch slot before 503 queue_full (a /v1/drafts call counts its items until each is admitted); [1, %d]", engine.MaxMaxQueue))
		queueTO    = fs.Duration("queue-timeout", engine.DefaultQueueTimeout, fmt.Sprintf("longest wait for a batch slot before 503 queue_timeout (the head of the queue too); (0, %v]", engine.MaxQueueTimeout))
		maxBody    = fs.Int64("max-body-bytes", d.MaxBodyBytes, fmt.Sprintf("POST /draft body limit in bytes (413 above); [%d, %d]", server.MinBodyBytes, server.MaxBodyBytes))
		maxInfl    = fs.Int64("max-inflight-body-bytes", d.MaxInflightBodyBytes, fmt.Sprintf("bytes of request bodies read or parsed at once (503 busy above); [--max-body-bytes, %d]", int64(server.MaxInflightBodyBytes)))
		bodyTO     = fs.Duration("body-timeout", d.BodyTimeout, fmt.Sprintf("time to receive a request body (408 after, and the connection closed); (0, %v]", server.MaxBodyTimeout))
		kvType     = kvTypeFlag(fs)
		draftVocab = fs.Int("draft-vocab", 0, "rows of a trimmed LM head for the draft argmax (FR-Spec): the special tokens and the most frequent ids of --draft-vocab-file; 0 = the whole vocabulary")
		vocabPath  = fs.String("draft-vocab-file", "", "token ranking `file` written by draftd vocab (required with --draft-vocab)")
		logFormat  = fs.String("log-format", "text", "log format: text or json")
		logLevel   = fs.String("log-level", "info", "log level: debug (one line per request), info, warn or error")
		strategy   = fs.String("strategy", draft.Default, "drafting strategy: "+strings.Join(draft.Names, ", ")+" (a request may name its own)")
		trustMatch = fs.Int("trust-match", draft.DefaultTrust, "hybrid keeps lookup tokens the model disagrees with when their match is at least this long (0: never)")
		choice     = fs.String("lookup-choice", draft.DefaultChoice.String(), "which earlier occurrence of the longest match lookup follows: recent or frequent (most frequent continuation)")
		minMatch   = fs.Int("min-match", draft.DefaultMinMatch, "hybrid proposes lookup tokens only after a match of at least this many tokens")
		eager      = fs.Bool("eager", draft.DefaultEager, fmt.Sprintf("with --trust-match 0, in steps of at most %d sequences hybrid also proposes a session's previous draft after its accepted tokens and lookup matches of any length (kept only where the model agrees: the draft does not change)", draft.SmallBatch))
		shutdownTO = fs.Duration("shutdown-timeout", d.ShutdownTimeout, fmt.Sprintf("how long the drain on a signal may take (in-flight requests finishing) before what remains is cut off and serve exits 1; (0, %v]", server.MaxShutdownTimeout))
		batchItems = fs.Int("max-batch-items", 0, fmt.Sprintf("items of one POST /v1/drafts call (400 too_many_items above); [0, --max-queue], 0: %d or --max-queue when smaller", d.MaxBatchItems))
		maxSess    = fs.Int("max-sessions", d.MaxSessions, fmt.Sprintf("sessions held at once; beyond, the least recently used is evicted; [1, %d]", server.MaxMaxSessions))
		sessTokens = fs.Int64("max-session-tokens", d.MaxSessionTokens, fmt.Sprintf("context + last-draft tokens held over all sessions (4 bytes each); beyond, the least recently used session is evicted; [max context + --max-draft-len, %d]", int64(server.MaxMaxSessionTokens)))
		predraft   = fs.Int("predraft-branches", 0, fmt.Sprintf("next requests drafted ahead per session while the engine has free slots (model strategy; below every request in priority); [0, %d], 0: off", server.MaxPredraftBranches))
		predraftD  = fs.Duration("predraft-delay", 2*time.Millisecond, fmt.Sprintf("pre-draft work starts only this long after the last step that held a request (a client's next request usually comes sooner); [0, %v]", engine.MaxBackgroundDelay))
		minConf    = fs.Float64("min-confidence", 0, "confidence bound of /v1/drafts items and session requests that give no min_confidence: their chain stops before the first token whose confidence (--confidence-signal) is below it; [0, 1], 0: off (a plain /draft without the field always returns n tokens)")
		confSignal = fs.String("confidence-signal", engine.ConfidenceSignal, fmt.Sprintf("confidence signal of requests that give no confidence_signal: %s (the drafter's probability of each token) or %s (the running product of the chain's: the drafter's estimate that the whole chain so far is right)", engine.SignalTop1, engine.SignalChain))
		sessTTL    = fs.Duration("session-ttl", d.SessionTTL, fmt.Sprintf("a session unused this long is dropped (409 unknown_session after); (0, %v]", server.MaxSessionTTL))
	)
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
	outside := func(flag string, v, lo, hi any) string {
		return fmt.Sprintf("--%s %v outside [%v, %v]", flag, v, lo, hi)
	}
	kv, kvMsg := kvType()
	for _, c := range []struct {
		bad bool
		msg string
	}{
		{kvMsg != "", kvMsg},
		{*draftVocab < 0, fmt.Sprintf("--draft-vocab %d must not be negative", *draftVocab)},
		{*draftVocab > 0 && *vocabPath == "", "--draft-vocab needs --draft-vocab-file (a `draftd vocab` ranking)"},
		{*draftVocab == 0 && *vocabPath != "", "--draft-vocab-file needs --draft-vocab N"},
		{*maxDraft < 1 || *maxDraft > engine.MaxMaxDraftLen, outside("max-draft-len", *maxDraft, 1, engine.MaxMaxDraftLen)},
		{*draftLen < 1 || *draftLen > *maxDraft, outside("draft-len", *draftLen, 1, fmt.Sprintf("--max-draft-len %d", *maxDraft))},
		{checkThreads(*threads) != nil, fmt.Sprint(checkThreads(*threads))},
		{*maxBatch < 1 || *maxBatch > engine.MaxMaxBatch, outside("max-batch", *maxBatch, 1, engine.MaxMaxBatch)},
		{*maxQueue < 1 || *maxQueue > engine.MaxMaxQueue, outside("max-queue", *maxQueue, 1, engine.MaxMaxQueue)},
		{*queueTO <= 0 || *queueTO > engine.MaxQueueTimeout, fmt.Sprintf("--queue-timeout %v outside (0, %v]", *queueTO, engine.MaxQueueTimeout)},
		{*kvBytes != 0 && (*kvBytes < minKVCacheBytes || *kvBytes > maxKVCacheBytes), fmt.Sprintf("--kv-cache-bytes %d: want 0 (automatic) or [%d, %d]", *kvBytes, minKVCacheBytes, int64(maxKVCacheBytes))},
		{*maxBody < server.MinBodyBytes || *maxBody > server.MaxBodyBytes, outside("max-body-bytes", *maxBody, server.MinBodyBytes, server.MaxBodyBytes)},
		{*maxInfl < *maxBody || *maxInfl > server.MaxInflightBodyBytes, outside("max-inflight-body-bytes", *maxInfl, fmt.Sprintf("--max-body-bytes %d", *maxBody), int64(server.MaxInflightBodyBytes))},
		{*bodyTO <= 0 || *bodyTO > server.MaxBodyTimeout, fmt.Sprintf("--body-timeout %v outside (0, %v]", *bodyTO, server.MaxBodyTimeout)},
		{*shutdownTO <= 0 || *shutdownTO > server.MaxShutdownTimeout, fmt.Sprintf("--shutdown-timeout %v outside (0, %v]", *shutdownTO, server.MaxShutdownTimeout)},
		{*batchItems < 0 || *batchItems > *maxQueue, outside("max-batch-items", *batchItems, 0, fmt.Sprintf("--max-queue %d", *maxQueue))},
		{*maxSess < 1 || *maxSess > server.MaxMaxSessions, outside("max-sessions", *maxSess, 1, server.MaxMaxSessions)},
		{*sessTokens < 1 || *sessTokens > server.MaxMaxSessionTokens, outside("max-session-tokens", *sessTokens, 1, int64(server.MaxMaxSessionTokens))},
		{*predraft < 0 || *predraft > server.MaxPredraftBranches, outside("predraft-branches", *predraft, 0, server.MaxPredraftBranches)},
		{*predraftD < 0 || *predraftD > engine.MaxBackgroundDelay, fmt.Sprintf("--predraft-delay %v outside [0, %v]", *predraftD, engine.MaxBackgroundDelay)},
		{!(*minConf >= 0 && *minConf <= engine.MaxConfidence), outside("min-confidence", *minConf, 0, engine.MaxConfidence)},
		{*sessTTL <= 0 || *sessTTL > server.MaxSessionTTL, fmt.Sprintf("--session-ttl %v outside (0, %v]", *sessTTL, server.MaxSessionTTL)},
		{!slices.Contains(draft.Names, *strategy), "--strategy must be one of " + strings.Join(draft.Names, ", ")},
		{*trustMatch < 0 || *trustMatch > draft.MaxMatch, outside("trust-match", *trustMatch, 0, draft.MaxMatch)},
		{*minMatch < 1 || *minMatch > draft.MaxMatch, outside("min-match", *minMatch, 1, draft.MaxMatch)},
		{*choice != "recent" && *choice != "frequent", "--lookup-choice must be recent or frequent"},
	} {
		if c.bad {
			return clientUsageError(fs, c.msg)
		}
	}
	if *draftVocab > 0 {
		if _, err := draftVocabIDs(*vocabPath, *draftVocab, math.MaxInt); err != nil {
			return clientUsageError(fs, err.Error())
		}
	}
	// One memory budget: what the sessions can hold at most
	// (session.MaxBytes: per --max-session-tokens token and per
	// --max-sessions session) is set aside from --kv-cache-bytes, the KV
	// blocks get the rest.
	memBudget := *kvBytes
	if memBudget == 0 {
		memBudget = engine.DefaultKVCacheBytes()
	}
	sessBytes := session.MaxBytes(*maxSess, *sessTokens)
	kvPart := memBudget - sessBytes
	if kvPart < minKVCacheBytes {
		return clientUsageError(fs, fmt.Sprintf("--kv-cache-bytes %d (the memory budget of KV cache and sessions) leaves %d bytes of KV cache after the %d bytes set aside for sessions (%d × --max-session-tokens %d + %d × --max-sessions %d); want at least %d: raise --kv-cache-bytes or lower --max-session-tokens or --max-sessions",
			memBudget, kvPart, sessBytes, session.MaxBytes(0, 1), *sessTokens, session.MaxBytes(1, 0), *maxSess, minKVCacheBytes))
	}
	lookup := draft.Options{Trust: *trustMatch, MinMatch: *minMatch, Choice: map[string]draft.Choice{"frequent": draft.Frequent}[*choice], Eager: *eager}
	strat, err := draft.New(*strategy, lookup)
	if err != nil {
		return clientUsageError(fs, err.Error())
	}
	cfg := server.Config{
		Name: *path,
		Open: withMemoryLimit(openBackend(backendOptions{
			ModelPath: *path,
			Resolve:   resolveModel,
			Model:     model.Options{Threads: *threads, KV: kv},
			Engine: engine.Options{MaxBatch: *maxBatch, MaxQueue: *maxQueue, KVCacheBytes: kvPart,
				MaxDraftLen: *maxDraft, QueueTimeout: *queueTO, Logger: logger, Strategy: strat,
				BackgroundDelay: *predraftD},
			Lookup:     lookup,
			DraftVocab: *draftVocab, DraftVocabFile: *vocabPath,
		}), memLimitFlags{budget: memBudget, inflight: *maxInfl, maxQueue: *maxQueue, maxBatch: *maxBatch}, logger),
		DraftLen: *draftLen, MaxBodyBytes: *maxBody, MaxInflightBodyBytes: *maxInfl,
		BodyTimeout: *bodyTO, ShutdownTimeout: *shutdownTO, Logger: logger,
		MaxBatchItems: *batchItems, MaxSessions: *maxSess, MaxSessionTokens: *sessTokens, SessionTTL: *sessTTL,
		PredraftBranches: *predraft, MinConfidence: float32(*minConf), ConfidenceSignal: *confSignal,
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: --addr %s: %w", *addr, err)
	}
	if err := server.Run(ctx, ln, cfg); err != nil {
		if errors.Is(err, server.ErrConfig) {
			// A bound that depends on the model (its maximum context),
			// checked once it is loaded: a usage error all the same.
			return clientUsageError(fs, err.Error())
		}
		return fmt.Errorf("serve: --model %s: %w", *path, err)
	}
	return nil
}

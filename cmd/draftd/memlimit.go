// The Go memory limit of `draftd serve`, derived from its flags (issue 37):
// without one, the collector lets the heap grow to twice what is live, and
// the KV blocks are live heap, so a full KV cache doubled the process's
// peak RSS under a stream of request bodies. This file computes the limit
// and sets it once the model is loaded; it is not a memory monitor.
package main

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/server"
)

// memOverheadBytes is the fixed part of the Go memory the limit allows
// beside the model, the memory budget and the bodies in flight: the
// engine's step buffers, connections, answers being written, the runtime's
// own structures.
const memOverheadBytes = 64 << 20

// memLimitFlags are the flags the limit follows from.
type memLimitFlags struct {
	budget   int64 // --kv-cache-bytes (KV blocks and sessions), resolved
	inflight int64 // --max-inflight-body-bytes
	maxQueue int   // --max-queue
	maxBatch int   // --max-batch
}

// goLimit is the Go memory limit for a process whose Go memory right after
// the model loaded was base: base + the memory budget + the bodies in
// flight + memOverheadBytes + what the requests that can be queued or
// running hold per token of their longest context and draft: 16 bytes
// queued (the parsed ids and the engine's copy, 8 bytes each), 32 running
// (those, and the lookup index's text, chain and hash table).
func (f memLimitFlags) goLimit(base int64, rules engine.Rules) int64 {
	perRequest := int64(16*f.maxQueue+32*f.maxBatch) * int64(rules.MaxContext+rules.MaxDraftLen)
	return base + f.budget + f.inflight + memOverheadBytes + perRequest
}

// goMemoryInUse is the Go runtime's memory that counts against its limit
// (runtime/debug.SetMemoryLimit): all it mapped, less what it returned to
// the system.
func goMemoryInUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// withMemoryLimit wraps a server.Config.Open: once the model is loaded and
// the engine started, it collects the loading's garbage, measures the Go
// memory in use and sets the limit from f — unless the operator set
// GOMEMLIMIT, which is kept. Either way it logs "memory limit".
func withMemoryLimit(open func(context.Context, engine.Observer) (server.Backend, error), f memLimitFlags, log *slog.Logger) func(context.Context, engine.Observer) (server.Backend, error) {
	return func(ctx context.Context, obs engine.Observer) (server.Backend, error) {
		b, err := open(ctx, obs)
		if err != nil {
			return b, err
		}
		if v := os.Getenv("GOMEMLIMIT"); v != "" {
			log.Info("memory limit", "go_memory_limit", debug.SetMemoryLimit(-1), "source", "GOMEMLIMIT="+v)
			return b, nil
		}
		runtime.GC()
		base := goMemoryInUse()
		limit := f.goLimit(base, b.Info().Rules)
		debug.SetMemoryLimit(limit)
		log.Info("memory limit", "go_memory_limit", limit, "source", "flags", "go_memory_at_load", base, "rss_at_load", selfRSS(),
			"memory_budget", f.budget, "max_inflight_body_bytes", f.inflight, "overhead", limit-base-f.budget-f.inflight)
		return b, nil
	}
}

// selfRSS is the process's resident set size from /proc/self/statm (Linux),
// or 0 where that cannot be read.
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// Prometheus metrics of GET /metrics (docs/protocol.md), on a registry of their own
// (so that tests and the in-process demo can run several servers). The
// engine reports its steps through the Observer methods here; the server
// reports requests. This file does not serve HTTP.

package server

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/session"
)

// metrics holds every collector of one server.
type metrics struct {
	reg *prometheus.Registry

	requests      *prometheus.CounterVec   // route, code
	latency       *prometheus.HistogramVec // route
	draftTokens   prometheus.Counter
	reqPrefill    prometheus.Histogram // prefill tokens per draft request
	panics        prometheus.Counter
	batch         prometheus.Histogram
	prefillTokens prometheus.Counter
	decodeTokens  prometheus.Counter
	cacheHit      prometheus.Counter
	startup       prometheus.Gauge
	bySource      *prometheus.CounterVec   // source: model, lookup
	proposals     *prometheus.CounterVec   // outcome: kept, rejected
	parse         *prometheus.HistogramVec // route: time to parse a body
	batchItems    prometheus.Histogram     // items per POST /v1/drafts call
	sessionReqs   *prometheus.CounterVec   // form: tokens, accepted; outcome: ok, unknown

	predraftReqs     *prometheus.CounterVec   // outcome: hit, partial_hit, miss, none
	predraftBranches *prometheus.CounterVec   // state: started, finished
	predraftWasted   prometheus.Counter       // tokens drafted ahead that no request used
	predraftAnswer   *prometheus.HistogramVec // outcome: server-side time to a session draft
	predraftWait     prometheus.Histogram     // what a request waited for the pre-draft step in flight
	predraftSkipped  prometheus.Counter       // session drafts served without pre-drafting (back-off)
	stepTime         *prometheus.HistogramVec // kind: forward step durations, request or background
	stepReq, stepBg  prometheus.Observer      // its two series, resolved once (observed every step)
}

// newMetrics registers the collectors; stats reads the engine's state, ok
// false while there is no engine; sessionCap is the sessions' share of the
// sessionCapHelp says what session.MaxBytes sets aside, per flag.
var sessionCapHelp = fmt.Sprintf("%d × --max-session-tokens + %d × --max-sessions", session.MaxBytes(0, 1), session.MaxBytes(1, 0))

// memory budget in bytes.
func newMetrics(stats func() (engine.Stats, bool), sessions func() session.Stats, sessionCap int64) *metrics {
	const ns = "draftd"
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "http_requests_total", Help: "HTTP requests answered, by route and status code.",
	}, []string{"route", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "http_request_duration_seconds", Help: "Time from request to answer, by route.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms … 65 s
	}, []string{"route"})
	m.draftTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "draft_tokens_served_total", Help: "Draft tokens returned in 200 answers.",
	})
	m.reqPrefill = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "request_prefill_tokens", Help: "Context tokens prefilled per draft request (not found in the prefix cache).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 17), // 1 … 65536
	})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "internal_errors_total", Help: "Requests answered 500 (panics and unmapped errors): bugs.",
	})
	m.batch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "batch_size", Help: "Sequences per engine step.",
		Buckets: []float64{1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128},
	})
	m.prefillTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "prefill_tokens_total", Help: "Context tokens run through the model in prefill.",
	})
	m.decodeTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "decode_tokens_total", Help: "Tokens run through the model in decode steps.",
	})
	m.cacheHit = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "prefix_cache_hit_tokens_total", Help: "Context tokens whose KV was found in the prefix cache.",
	})
	m.startup = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "startup_seconds", Help: "Time from start to healthy (model loaded and warmed up); 0 while loading.",
	})
	m.bySource = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "draft_tokens_by_source_total", Help: "Draft tokens returned, by where they came from: the model's greedy choice or a lookup in the context.",
	}, []string{"source"})
	m.proposals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "lookup_proposal_tokens_total", Help: "Lookup proposal tokens of the hybrid strategy run through the model, by outcome: kept in the draft or rejected.",
	}, []string{"outcome"})
	m.parse = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "request_parse_seconds", Help: "Time to parse and validate a request body (also in each answer's Server-Timing header), by route.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 22), // 1 µs … 2 s
	}, []string{"route"})
	m.batchItems = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "batch_items", Help: "Items per POST /v1/drafts call.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
	})
	m.sessionReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "session_requests_total", Help: "Session drafts asked for, by form (tokens: context established; accepted: extended) and outcome (ok, unknown_session, error).",
	}, []string{"form", "outcome"})
	for _, f := range []string{"tokens", "accepted"} {
		for _, o := range []string{"ok", "unknown_session", "error"} {
			m.sessionReqs.WithLabelValues(f, o)
		}
	}
	m.predraftReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "predraft_requests_total", Help: "Incremental session drafts with pre-drafting on (--predraft-branches), by outcome: hit (answered from a finished branch), partial_hit (a branch part-drafted, promoted and waited for), miss (branches existed; none matched, or the match had not started), none (no branch for the session).",
	}, []string{"outcome"})
	m.predraftBranches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "predraft_branches_total", Help: "Pre-draft branches, by state: started (at most --predraft-branches per answered session draft) and finished (drafted, dropped or evicted).",
	}, []string{"state"})
	m.predraftBranches.WithLabelValues("started")
	m.predraftBranches.WithLabelValues("finished")
	m.predraftWasted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "predraft_wasted_tokens_total", Help: "Draft tokens made by pre-draft branches that no request used (dropped, evicted or superseded).",
	})
	m.predraftAnswer = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "predraft_answer_seconds", Help: "Server-side time from a session request's resolution to its draft, by pre-draft outcome (hit, partial_hit, miss, none).",
		Buckets: prometheus.ExponentialBuckets(1e-5, 2, 24), // 10 µs … 84 s
	}, []string{"outcome"})
	m.predraftWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "predraft_request_wait_seconds", Help: "Per draft request queued while a step holding only pre-draft work ran: the time from its queueing to that step's end, the latency pre-drafting added to it (at most that one step).",
		Buckets: prometheus.ExponentialBuckets(1e-5, 2, 24),
	})
	m.predraftSkipped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: ns, Name: "predraft_skipped_total", Help: "Session drafts served without pre-drafting (no runner-up, no branches) because none of the last 32 branch sets had drafted a token before its session's next request; one draft in 16 still pre-drafts, to notice when branches would run again.",
	})
	m.stepTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "step_seconds", Help: "Duration of each engine forward step, by kind: request (holds at least one request) or background (pre-draft sequences only).",
		Buckets: prometheus.ExponentialBuckets(1e-5, 2, 24),
	}, []string{"kind"})
	m.stepReq, m.stepBg = m.stepTime.WithLabelValues("request"), m.stepTime.WithLabelValues("background")
	for _, o := range []string{predraftHit, predraftPartial, predraftMiss, predraftNone} {
		m.predraftReqs.WithLabelValues(o)
		m.predraftAnswer.WithLabelValues(o)
	}
	for _, l := range []string{"model", "lookup"} {
		m.bySource.WithLabelValues(l)
	}
	for _, l := range []string{"kept", "rejected"} {
		m.proposals.WithLabelValues(l)
	}
	stat := func(f func(engine.Stats) float64) func() float64 {
		return func() float64 {
			if s, ok := stats(); ok {
				return f(s)
			}
			return 0
		}
	}
	m.reg.MustRegister(
		m.requests, m.latency, m.draftTokens, m.reqPrefill, m.panics,
		m.batch, m.prefillTokens, m.decodeTokens, m.cacheHit, m.startup, m.bySource, m.proposals,
		m.parse, m.batchItems, m.sessionReqs,
		m.predraftReqs, m.predraftBranches, m.predraftWasted, m.predraftAnswer, m.predraftWait, m.predraftSkipped, m.stepTime,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Name: "predraft_tokens_total", Help: "Draft tokens made by pre-draft branches while below requests in priority.",
		}, stat(func(s engine.Stats) float64 { return float64(s.BackgroundTokens) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Name: "predraft_preemptions_total", Help: "Pre-draft sequences taken out of the batch at a step boundary for a request's slot (resumed later).",
		}, stat(func(s engine.Stats) float64 { return float64(s.Preemptions) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Name: "predraft_stopped_steps_total", Help: "Steps of pre-draft sequences only that were stopped between layers because a request arrived (their sequences run that step again later).",
		}, stat(func(s engine.Stats) float64 { return float64(s.BackgroundStops) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Name: "predraft_evictions_total", Help: "Pre-draft sequences ended to free KV cache for a request.",
		}, stat(func(s engine.Stats) float64 { return float64(s.BackgroundEvicts) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "predraft_queued", Help: "Pre-draft branches waiting for a free batch slot.",
		}, stat(func(s engine.Stats) float64 { return float64(s.BackgroundQueued) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "predraft_sequences", Help: "Pre-draft sequences holding KV cache (in the batch or parked).",
		}, stat(func(s engine.Stats) float64 { return float64(s.BackgroundActive) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "sessions", Help: "Sessions held (--max-sessions).",
		}, func() float64 { return float64(sessions().Sessions) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "session_tokens", Help: "Context and last-draft tokens held by sessions (--max-session-tokens), 4 bytes each.",
		}, func() float64 { return float64(sessions().Tokens) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "session_bytes", Help: "Bytes held by sessions: their token arrays as allocated (4 bytes per token), plus each session's id and 320 bytes of bookkeeping.",
		}, func() float64 { return float64(sessions().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Name: "sessions_deleted_total", Help: "Sessions deleted by DELETE /v1/sessions/ID.",
		}, func() float64 { return float64(sessions().Deleted) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "queue_depth", Help: "Draft requests waiting for a batch slot.",
		}, stat(func(s engine.Stats) float64 { return float64(s.QueueDepth) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "active_sequences", Help: "Draft requests in the running batch.",
		}, stat(func(s engine.Stats) float64 { return float64(s.Active) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "kv_cache_bytes", Help: "Bytes of KV cache blocks in use (held by sequences or the prefix cache).",
		}, stat(func(s engine.Stats) float64 { return float64(s.KVBytesInUse) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "kv_cache_budget_bytes", Help: "The KV cache's byte budget: its part of the memory budget (--kv-cache-bytes less what the sessions can hold: " + sessionCapHelp + ").",
		}, stat(func(s engine.Stats) float64 { return float64(s.KVBytesBudget) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "memory_budget_bytes", Help: "The memory budget of KV cache and sessions (--kv-cache-bytes): draftd_kv_cache_budget_bytes + " + sessionCapHelp + ".",
		}, stat(func(s engine.Stats) float64 { return float64(s.KVBytesBudget + sessionCap) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: ns, Name: "memory_bytes", Help: "Bytes of the memory budget in use: KV cache blocks (pre-draft sequences included) plus session token ids.",
		}, stat(func(s engine.Stats) float64 { return float64(s.KVBytesInUse + sessions().Bytes) })),
		sessionEvictions(ns, sessions),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// observer adapts metrics to engine.Observer; it is called from the engine's
// goroutine and only touches atomic collectors.
type observer struct{ m *metrics }

var _ engine.Observer = observer{}

// Step implements engine.Observer.
func (o observer) Step(batchSize, prefillTokens, decodeTokens int) {
	o.m.batch.Observe(float64(batchSize))
	o.m.prefillTokens.Add(float64(prefillTokens))
	o.m.decodeTokens.Add(float64(decodeTokens))
}

// CacheHit implements engine.Observer.
func (o observer) CacheHit(tokens int) { o.m.cacheHit.Add(float64(tokens)) }

// StepTime implements engine.Observer.
func (o observer) StepTime(d time.Duration, background bool) {
	h := o.m.stepReq
	if background {
		h = o.m.stepBg
	}
	h.Observe(d.Seconds())
}

// BackgroundWait implements engine.Observer.
func (o observer) BackgroundWait(d time.Duration) { o.m.predraftWait.Observe(d.Seconds()) }

// sources counts where the tokens of one draft came from.
func (m *metrics) sources(res engine.Result) {
	src := res.Sources
	m.bySource.WithLabelValues("model").Add(float64(src.FromModel))
	m.bySource.WithLabelValues("lookup").Add(float64(src.FromLookup))
	if res.Strategy == draft.NameHybrid {
		m.proposals.WithLabelValues("kept").Add(float64(src.Kept))
		m.proposals.WithLabelValues("rejected").Add(float64(src.Rejected))
	}
}

// request records one answered request.
func (m *metrics) request(route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, itoa(int64(status))).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// evictionCollector exports the session store's evictions by reason.
type evictionCollector struct {
	desc  *prometheus.Desc
	stats func() session.Stats
}

func sessionEvictions(ns string, stats func() session.Stats) prometheus.Collector {
	return evictionCollector{
		desc: prometheus.NewDesc(ns+"_session_evictions_total",
			"Sessions evicted, by reason: count (--max-sessions), tokens (--max-session-tokens), idle (--session-ttl).", []string{"reason"}, nil),
		stats: stats,
	}
}

func (c evictionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c evictionCollector) Collect(ch chan<- prometheus.Metric) {
	ev := c.stats().Evicted
	for _, r := range []string{session.ReasonCount, session.ReasonTokens, session.ReasonIdle} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(ev[r]), r)
	}
}

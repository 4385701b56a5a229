// This file is the result of a replay: the Report type (its JSON form is what
// `draftd eval --json` writes) and its text form. It does not measure
// anything itself.

package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is the outcome of Replay. JSON keys are a contract (issue 3):
// tau, tau_macro, tokens, steps, requests, failures, wall_s, latency_ms,
// accept_hist, accept_by_position.
//
// Acceptance by draft position: for position i (0-based: index 0 is the
// first draft token),
//
//	accept_by_position[i] = position_accepted[i] / position_reached[i]
//
// where position_reached[i] counts the steps whose draft had a token at
// position i (len(draft) > i) and position_accepted[i] counts the steps whose
// accepted length exceeded i. It estimates P(token i is accepted | the drafter
// proposed a token i); since acceptance is a prefix, position_accepted[i] is
// also the number of steps with accepted length > i, so the rate falls with i.
// Failed requests propose nothing and count at no position (they are in
// accept_hist[0]). A position no draft reached has rate 0 and reached 0.
type Report struct {
	Backend     string  `json:"backend,omitempty"`
	URL         string  `json:"url,omitempty"`
	Data        string  `json:"data,omitempty"`
	N           int     `json:"n"`
	Concurrency int     `json:"concurrency"`
	TimeoutS    float64 `json:"timeout_s"`

	Samples      int `json:"samples"`       // replayed to the end
	SamplesTotal int `json:"samples_total"` // in the dataset (after --limit)

	Tau      float64 `json:"tau"`       // Σ tokens / Σ steps
	TauMacro float64 `json:"tau_macro"` // mean of per-sample τ
	Tokens   int64   `json:"tokens"`    // Σ len(continuation)
	Steps    int64   `json:"steps"`
	Requests int64   `json:"requests"` // draft requests: one per step (with --clip-n, less the steps left without one)
	Failures int64   `json:"failures"`
	// FailureKinds counts failures by kind ("timeout", "HTTP 503", ...).
	FailureKinds map[string]int `json:"failure_kinds,omitempty"`
	FirstError   string         `json:"first_error,omitempty"`
	// PeerFailures is the part of Failures that is the measured server's own
	// defect (a *PeerError: it generated the draft but could not deliver
	// it), by reason in PeerFailureReasons. They are scored like every
	// failure; they are counted apart so that a comparison with a peer
	// (llama-server) can tell its bugs from its load.
	PeerFailures       int64          `json:"peer_failures"`
	PeerFailureReasons map[string]int `json:"peer_failure_reasons,omitempty"`

	WallS float64 `json:"wall_s"`
	// LatencyMS is over successful requests only; failures are counted apart.
	LatencyMS       Latency `json:"latency_ms"`
	DraftTokens     int64   `json:"draft_tokens"` // Σ len(draft), successful requests
	DraftTokensPerS float64 `json:"draft_tokens_per_s"`
	RequestsPerS    float64 `json:"requests_per_s"`
	AcceptedPerStep float64 `json:"accepted_per_step"` // τ − 1
	// DraftMSPerAccepted is what a stack pays the drafter per token it
	// keeps: the latency summed over every draft request except each
	// sample's first (which carries the prompt), divided by the accepted
	// draft tokens (Σ accepted length over all steps). 0 when none was
	// accepted.
	DraftMSPerAccepted float64 `json:"draft_ms_per_accepted"`
	// DraftedPerAccepted is draft_tokens / accepted draft tokens: the
	// drafter's tokens per token the target keeps.
	DraftedPerAccepted float64 `json:"drafted_per_accepted"`
	AcceptedTokens     int64   `json:"accepted_tokens"` // Σ accepted length over all steps
	// MinConfidence is the confidence bound sent with each request (0:
	// none sent).
	MinConfidence    float64   `json:"min_confidence"`
	ConfidenceSignal string    `json:"confidence_signal,omitempty"` // sent with each request ("": none)
	AcceptHist       []int64   `json:"accept_hist"`                 // (n+1) steps by accepted length 0..n
	AcceptByPosition []float64 `json:"accept_by_position"`          // (n)
	PositionReached  []int64   `json:"position_reached"`            // (n)
	PositionAccepted []int64   `json:"position_accepted"`           // (n)

	// Batched and incremental drafting (docs/protocol.md): how drafts were asked for, and what it cost on the wire.
	Protocol        string  `json:"protocol"`          // full, session or batch
	TargetLatencyMS float64 `json:"target_latency_ms"` // waited after each draft (round, for batch)
	Resends         int64   `json:"session_resends"`   // 409 unknown_session answered by resending the context
	HTTPRequests    int64   `json:"http_requests,omitempty"`
	BytesSent       int64   `json:"bytes_sent,omitempty"`     // request body bytes
	BytesPerStep    float64 `json:"bytes_per_step,omitempty"` // BytesSent / steps
	// ServerParseMS is the server's mean time to parse one request body
	// (its Server-Timing header); a batch call is one body.
	ServerParseMS float64 `json:"server_parse_ms_mean,omitempty"`
	// Predraft is the server's pre-drafting over the replay (its
	// /metrics before and after); nil when it did not pre-draft.
	Predraft *Predraft `json:"predraft,omitempty"`

	Projection *Projection `json:"projection,omitempty"`

	ServerInfo json.RawMessage `json:"server_info,omitempty"`
	PerSample  []SampleResult  `json:"per_sample"`
}

// Projection scales the measured serving time to a larger set of tokens at
// the same concurrency, τ and per-request cost: wall_s = measured wall_s ×
// tokens / measured tokens, requests = tokens / τ.
type Projection struct {
	Tokens   int64   `json:"tokens"`
	Requests float64 `json:"requests"`
	WallS    float64 `json:"wall_s"`
}

func newReport(t *tally, wall time.Duration, opt ReplayOptions) *Report {
	r := &Report{
		N:                  opt.N,
		Concurrency:        max(opt.Concurrency, 1),
		TimeoutS:           opt.Timeout.Seconds(),
		Tokens:             t.tokens,
		Steps:              t.steps,
		Requests:           t.requests,
		Failures:           int64(t.fails.n),
		FailureKinds:       t.fails.kinds,
		FirstError:         t.fails.first,
		PeerFailures:       int64(t.fails.peer),
		PeerFailureReasons: t.fails.peers,
		WallS:              wall.Seconds(),
		LatencyMS:          summarize(t.latencies),
		DraftTokens:        t.draftTokens,
		AcceptHist:         t.hist,
		PositionReached:    t.reached,
		PositionAccepted:   t.accepted,
		AcceptByPosition:   make([]float64, len(t.reached)),
		Protocol:           opt.Protocol,
		TargetLatencyMS:    float64(opt.TargetLatency) / 1e6,
		Resends:            t.resends,
	}
	if r.Protocol == "" {
		r.Protocol = ProtocolFull
	}
	if t.steps > 0 {
		r.Tau = float64(t.tokens) / float64(t.steps)
		r.AcceptedPerStep = r.Tau - 1
	}
	r.AcceptedTokens = t.acceptedToks
	if t.acceptedToks > 0 {
		r.DraftMSPerAccepted = float64(t.warmNS) / 1e6 / float64(t.acceptedToks)
		r.DraftedPerAccepted = float64(t.draftTokens) / float64(t.acceptedToks)
	}
	if s := wall.Seconds(); s > 0 {
		r.DraftTokensPerS = float64(t.draftTokens) / s
		r.RequestsPerS = float64(t.steps) / s
	}
	for i := range t.reached {
		if t.reached[i] > 0 {
			r.AcceptByPosition[i] = float64(t.accepted[i]) / float64(t.reached[i])
		}
	}
	return r
}

// Project sets r.Projection for a set of tokens tokens; it does nothing when
// tokens ≤ 0 or nothing was measured.
func (r *Report) Project(tokens int64) {
	if tokens <= 0 || r.Tokens == 0 || r.Tau == 0 {
		return
	}
	r.Projection = &Projection{
		Tokens:   tokens,
		Requests: float64(tokens) / r.Tau,
		WallS:    r.WallS * float64(tokens) / float64(r.Tokens),
	}
}

// WriteText prints the report for people.
// AddWire adds a client's wire counters to the report.
func (r *Report) AddWire(w *Wire) {
	if w == nil {
		return
	}
	r.HTTPRequests, r.BytesSent = w.Requests.Load(), w.BytesSent.Load()
	if r.Steps > 0 {
		r.BytesPerStep = float64(r.BytesSent) / float64(r.Steps)
	}
	if n := w.Parsed.Load(); n > 0 {
		r.ServerParseMS = float64(w.ParseNS.Load()) / 1e6 / float64(n)
	}
}

func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "replayed %d of %d samples", r.Samples, r.SamplesTotal)
	if r.Backend != "" {
		fmt.Fprintf(&b, " against %s (%s)", r.URL, r.Backend)
	}
	fmt.Fprintf(&b, ", n=%d, concurrency %d\n\n", r.N, r.Concurrency)
	fmt.Fprintf(&b, "  τ (micro)        %.4f   (%d tokens / %d steps)   draft ms per accepted token %.2f   drafted per accepted %.2f\n",
		r.Tau, r.Tokens, r.Steps, r.DraftMSPerAccepted, r.DraftedPerAccepted)
	if r.MinConfidence > 0 {
		fmt.Fprintf(&b, "  min confidence   %g   (sent with each request)\n", r.MinConfidence)
	}
	if r.ConfidenceSignal != "" {
		fmt.Fprintf(&b, "  confidence signal %s   (sent with each request)\n", r.ConfidenceSignal)
	}
	fmt.Fprintf(&b, "  τ (macro)        %.4f   (mean over samples)\n", r.TauMacro)
	fmt.Fprintf(&b, "  requests         %d   failures %d", r.Requests, r.Failures)
	if r.Requests > 0 && r.Failures > 0 {
		fmt.Fprintf(&b, " (%.2f%%)", 100*float64(r.Failures)/float64(r.Requests))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  protocol         %s, target latency %.1f ms", r.Protocol, r.TargetLatencyMS)
	if r.BytesSent > 0 {
		fmt.Fprintf(&b, ", %.0f bytes sent per step, server parse %.3f ms per body, %d HTTP requests, %d session resends",
			r.BytesPerStep, r.ServerParseMS, r.HTTPRequests, r.Resends)
	}
	b.WriteString("\n")
	if p := r.Predraft; p != nil {
		fmt.Fprintf(&b, "  pre-drafting     hit rate %.1f%% (%d hits, %d partial, %d misses, %d without branches), %d branches, %d tokens wasted; server answer %.3f ms hit, %.3f ms partial, %.3f ms miss\n",
			100*p.HitRate, p.Hits, p.PartialHits, p.Misses, p.None, p.Branches, p.WastedTokens, p.HitAnswerMS, p.PartialAnswerMS, p.MissAnswerMS)
		fmt.Fprintf(&b, "  pre-draft wait   %d requests queued during a pre-draft-only step waited %.3f ms on average for it (all ≤ %.3f ms); steps: %.3f ms with a request, %.3f ms pre-draft only (means)\n",
			p.WaitedRequests, p.WaitMS, p.WaitMaxBucketMS, p.RequestStepMS, p.BackgroundStepMS)
	}
	if r.Failures > 0 {
		fmt.Fprintf(&b, "  failure kinds    %s\n  first error      %s\n", formatKinds(r.FailureKinds), r.FirstError)
	}
	if r.PeerFailures > 0 {
		fmt.Fprintf(&b, "  peer's own       %d of the failures are the server's own defect: %s\n", r.PeerFailures, formatKinds(r.PeerFailureReasons))
	}
	fmt.Fprintf(&b, "  wall time        %.2f s   %.1f requests/s   %.1f draft tokens/s\n", r.WallS, r.RequestsPerS, r.DraftTokensPerS)
	l := r.LatencyMS
	fmt.Fprintf(&b, "  latency (ms)     p50 %.1f   p90 %.1f   p99 %.1f   mean %.1f   max %.1f\n", l.P50, l.P90, l.P99, l.Mean, l.Max)

	b.WriteString("\n  accepted length per step (histogram):\n")
	var most int64
	for _, c := range r.AcceptHist {
		most = max(most, c)
	}
	for a, c := range r.AcceptHist {
		pct, bar := 0.0, 0
		if r.Steps > 0 {
			pct = 100 * float64(c) / float64(r.Steps)
		}
		if most > 0 {
			bar = int(40 * c / most)
		}
		fmt.Fprintf(&b, "    %3d %9d %6.2f%%  %s\n", a, c, pct, strings.Repeat("#", bar))
	}
	b.WriteString("\n  acceptance by draft position (accepted / drafts with a token there):\n")
	for i, rate := range r.AcceptByPosition {
		fmt.Fprintf(&b, "    %3d  %.4f  (%d/%d)\n", i+1, rate, r.PositionAccepted[i], r.PositionReached[i])
	}
	if p := r.Projection; p != nil {
		fmt.Fprintf(&b, "\n  projection to %d tokens: ~%.0f requests, ~%s at concurrency %d\n",
			p.Tokens, p.Requests, fmtSeconds(p.WallS), r.Concurrency)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtSeconds prints s seconds as a rounded duration ("1h2m3s"), or in
// seconds when that would overflow a time.Duration.
func fmtSeconds(s float64) string {
	if s >= 1e9 {
		return fmt.Sprintf("%.3g s", s)
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

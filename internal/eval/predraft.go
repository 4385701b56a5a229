// The server's pre-drafting counters over one replay (docs/protocol.md,
// pre-drafting): GET /metrics read before and after, and the difference of
// the draftd_predraft_* samples. They are the server's view: hits, partial
// hits, misses, requests without branches, wasted tokens and the mean
// server-side answer time by outcome. It does not replay or report.

package eval

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Predraft is the pre-draft part of a report.
type Predraft struct {
	Hits         int64 `json:"hits"`
	PartialHits  int64 `json:"partial_hits"`
	Misses       int64 `json:"misses"`
	None         int64 `json:"none"` // incremental requests with no branch for their session
	Branches     int64 `json:"branches"`
	WastedTokens int64 `json:"wasted_tokens"`
	// HitRate is (hits + partial hits) / every incremental session
	// request with pre-drafting on (the four outcomes).
	HitRate float64 `json:"hit_rate"`
	// Mean server-side time from a session request's resolution to its
	// draft, by outcome (draftd_predraft_answer_seconds).
	HitAnswerMS     float64 `json:"hit_answer_ms"`
	PartialAnswerMS float64 `json:"partial_answer_ms"`
	MissAnswerMS    float64 `json:"miss_answer_ms"`
	// WaitedRequests: draft requests queued while a step holding only
	// pre-draft work ran; WaitMS their mean wait for it (what pre-drafting
	// added to their latency), WaitMaxBucketMS the upper bound of the
	// highest histogram bucket any of them reached
	// (draftd_predraft_request_wait_seconds).
	WaitedRequests  int64   `json:"waited_requests"`
	WaitMS          float64 `json:"wait_ms"`
	WaitMaxBucketMS float64 `json:"wait_max_bucket_ms"`
	// Mean duration of the engine's steps that held a request and of those
	// that held only pre-draft work (draftd_step_seconds).
	RequestStepMS    float64 `json:"request_step_ms"`
	BackgroundStepMS float64 `json:"background_step_ms"`
}

// Metrics is one read of GET /metrics: sample name with its labels as
// written (`name{label="v"}`) → value.
type Metrics map[string]float64

// FetchMetrics reads GET /metrics.
func FetchMetrics(ctx context.Context, hc *http.Client, base string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	m := Metrics{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "draftd_predraft_") && !strings.HasPrefix(line, "draftd_step_seconds") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// PredraftDelta is the pre-draft part of a report from reads before and
// after a replay; nil when the server has no pre-draft metrics or served no
// incremental request with pre-drafting on.
func PredraftDelta(before, after Metrics) *Predraft {
	d := func(k string) float64 { return after[k] - before[k] }
	out := func(o string) int64 { return int64(d(`draftd_predraft_requests_total{outcome="` + o + `"}`)) }
	p := &Predraft{
		Hits: out("hit"), PartialHits: out("partial_hit"), Misses: out("miss"), None: out("none"),
		Branches:     int64(d(`draftd_predraft_branches_total{state="started"}`)),
		WastedTokens: int64(d("draftd_predraft_wasted_tokens_total")),
	}
	total := p.Hits + p.PartialHits + p.Misses + p.None
	if total == 0 {
		return nil
	}
	p.HitRate = float64(p.Hits+p.PartialHits) / float64(total)
	mean := func(o string) float64 {
		n := d(`draftd_predraft_answer_seconds_count{outcome="` + o + `"}`)
		if n == 0 {
			return 0
		}
		return 1e3 * d(`draftd_predraft_answer_seconds_sum{outcome="`+o+`"}`) / n
	}
	p.HitAnswerMS, p.PartialAnswerMS, p.MissAnswerMS = mean("hit"), mean("partial_hit"), mean("miss")
	meanOf := func(name, labels string) float64 {
		n := d(name + "_count" + labels)
		if n == 0 {
			return 0
		}
		return 1e3 * d(name+"_sum"+labels) / n
	}
	p.WaitedRequests = int64(d("draftd_predraft_request_wait_seconds_count"))
	p.WaitMS = meanOf("draftd_predraft_request_wait_seconds", "")
	p.WaitMaxBucketMS = maxBucket(before, after, "draftd_predraft_request_wait_seconds_bucket")
	p.RequestStepMS = meanOf("draftd_step_seconds", `{kind="request"}`)
	p.BackgroundStepMS = meanOf("draftd_step_seconds", `{kind="background"}`)
	return p
}

// maxBucket is the upper bound, in ms, of the lowest bucket of a histogram
// (name_bucket{le="…"}) that holds every sample added between the reads; 0
// with none added, -1 when a sample is above every finite bucket.
func maxBucket(before, after Metrics, name string) float64 {
	total := after[name+`{le="+Inf"}`] - before[name+`{le="+Inf"}`]
	if total == 0 {
		return 0
	}
	best := math.Inf(1)
	for k, v := range after {
		le, ok := strings.CutPrefix(k, name+`{le="`)
		if !ok {
			continue
		}
		b, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64)
		if err != nil || math.IsInf(b, 1) {
			continue
		}
		if v-before[k] == total && b < best {
			best = b
		}
	}
	if math.IsInf(best, 1) {
		return -1
	}
	return 1e3 * best
}

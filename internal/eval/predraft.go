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
		if !strings.HasPrefix(line, "draftd_predraft_") {
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
	return p
}

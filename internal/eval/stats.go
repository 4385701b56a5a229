// This file holds the small statistics shared by eval and bench: latency
// percentiles and the classification of failed requests. It does no I/O.

package eval

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Latency summarizes request latencies in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// summarize returns the nearest-rank percentiles of ds: the p-th percentile
// is the smallest latency with at least p% of the requests at or below it
// (sorted[ceil(p/100·N)−1]). ds is sorted in place.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds))/100)) - 1
		return ms(ds[max(i, 0)])
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{
		P50:  rank(50),
		P90:  rank(90),
		P99:  rank(99),
		Mean: ms(sum) / float64(len(ds)),
		Max:  ms(ds[len(ds)-1]),
	}
}

// failureKind names the class of a failed request for the report:
// "timeout", "HTTP 503", "connection", or "bad response".
func failureKind(err error) string {
	var se *StatusError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &se):
		return "HTTP " + strconv.Itoa(se.Status)
	case errors.Is(err, ErrBadResponse):
		return "bad response"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "connection"
}

// failures counts failed requests by kind and keeps the first error; the
// ones that are the peer server's own defect (*PeerError) are also counted
// by reason.
type failures struct {
	n     int
	kinds map[string]int
	first string
	peer  int
	peers map[string]int // by PeerError.Reason
}

func (f *failures) add(err error) {
	if f.kinds == nil {
		f.kinds = map[string]int{}
	}
	f.n++
	f.kinds[failureKind(err)]++
	if f.first == "" {
		f.first = err.Error()
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		if f.peers == nil {
			f.peers = map[string]int{}
		}
		f.peer++
		f.peers[pe.Reason]++
	}
}

func (f *failures) merge(g failures) {
	if g.n == 0 {
		return
	}
	if f.kinds == nil {
		f.kinds = map[string]int{}
	}
	f.n += g.n
	for k, v := range g.kinds {
		f.kinds[k] += v
	}
	if g.peer > 0 {
		if f.peers == nil {
			f.peers = map[string]int{}
		}
		f.peer += g.peer
		for k, v := range g.peers {
			f.peers[k] += v
		}
	}
	if f.first == "" {
		f.first = g.first
	}
}

// formatKinds prints failure counts by kind, sorted: "HTTP 503 2, timeout 1".
func formatKinds(kinds map[string]int) string {
	names := slices.Sorted(maps.Keys(kinds))
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, kinds[k])
	}
	return strings.Join(parts, ", ")
}

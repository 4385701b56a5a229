package draft

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// traceRecord is one request of a recorded session replay: its context, the
// model's chain (the draft every trust-0 strategy returns) and the session's
// previous draft after its accepted tokens.
type traceRecord struct {
	Ctx    []int `json:"ctx"`
	Draft  []int `json:"draft"`
	Recall []int `json:"recall"`
}

// simulate drives s over the records as the engine would, with the model's
// greedy token taken from each record's chain (exact while the proposal
// agrees, which is all Accept reads), and counts forward steps and rows.
func simulate(t *testing.T, recs []traceRecord, s Guided) (steps, rows, kept, recalled int, cost float64) {
	for _, r := range recs {
		n := len(r.Draft)
		var d Drafter
		if rs, ok := s.(Recaller); ok && len(r.Recall) > 0 {
			d = rs.StartRecall(r.Ctx, n, r.Recall)
		} else {
			d = s.Start(r.Ctx, n)
		}
		got := 0
		for got < n {
			room := n - got - 1
			var p []int
			if room > 0 {
				p = d.Propose(room)
			}
			p = p[:min(len(p), room)]
			g := make([]int, len(p)+1)
			for i := range g {
				g[i] = -1
				if got+i < n {
					g[i] = r.Draft[got+i]
				}
			}
			k := d.Accept(g)
			for i := 0; i < k; i++ {
				if p[i] != r.Draft[got+i] {
					t.Fatalf("kept a token off the chain")
				}
			}
			got += k + 1
			steps++
			rows += 1 + len(p)
			cost += rowCost(1 + len(p))
		}
		if c, ok := d.(Counter); ok {
			kept += c.Stats().Kept
			recalled += c.Stats().Recalled
		}
	}
	return
}

// stepCost is the CPU time of one forward step of one sequence by its rows
// (real drafter, 300 positions, medians of 16 alternating runs), relative to
// one row; rowCost interpolates it.
var stepCost = map[int]float64{1: 50.1, 2: 53.8, 3: 58.0, 4: 59.9, 6: 67.5, 8: 79.0, 12: 98.4, 16: 130.5}

func rowCost(r int) float64 {
	lo, hi := 1, 16
	for k := range stepCost {
		if k <= r && k > lo {
			lo = k
		}
		if k >= r && k < hi {
			hi = k
		}
	}
	c := stepCost[lo]
	if hi > lo {
		c += (stepCost[hi] - stepCost[lo]) * float64(r-lo) / float64(hi-lo)
	}
	return c / stepCost[1]
}

// TestRecallTrace replays recorded session traces (DRAFTD_RECALL_TRACES,
// comma-separated JSON Lines of traceRecord: a session replay's requests
// with the model's drafts) through model, hybrid and eager hybrid, as one
// sequence alone in its steps, and logs their forward steps, rows and the
// CPU cost those predict (stepCost). Without the variable it replays a
// small built-in trace. Every strategy's steps must be at most model's, and
// eager hybrid's at most hybrid's where recall continues the chain.
func TestRecallTrace(t *testing.T) {
	traces := map[string][]traceRecord{}
	env := os.Getenv("DRAFTD_RECALL_TRACES")
	if env == "" {
		// The second request's chain continues the first one's after a
		// replaced token (recall keeps it), the third's does not.
		traces["built-in"] = []traceRecord{
			{Ctx: []int{1, 2, 3}, Draft: []int{10, 11, 12, 13, 14, 15, 16, 17}},
			{Ctx: []int{1, 2, 3, 10, 11, 50}, Draft: []int{13, 14, 15, 16, 17, 18, 19, 20}, Recall: []int{12, 13, 14, 15, 16, 17}},
			{Ctx: []int{1, 2, 3, 10, 11, 50, 13, 60}, Draft: []int{70, 71, 72, 73}, Recall: []int{14, 15, 16, 17, 18, 19, 20}},
		}
	}
	for _, path := range strings.Split(env, ",") {
		if path == "" {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var r traceRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			traces[path] = append(traces[path], r)
		}
		f.Close()
	}
	for path, recs := range traces {
		steps := map[string]int{}
		for _, v := range []struct {
			name string
			s    Guided
		}{
			{"model", Model{}},
			{"hybrid", Hybrid{Opt: Options{MinMatch: 4, Choice: Frequent}}},
			{"hybrid --eager", Hybrid{Opt: Options{MinMatch: 4, Choice: Frequent, Eager: true}}},
		} {
			st, rows, kept, recalled, cost := simulate(t, recs, v.s)
			steps[v.name] = st
			t.Logf("%s %-15s requests %d steps %d rows %d kept %d (recalled %d) cost %.0f one-row steps", path, v.name, len(recs), st, rows, kept, recalled, cost)
		}
		if steps["hybrid"] > steps["model"] || steps["hybrid --eager"] > steps["model"] {
			t.Errorf("%s: steps %v; proposals must never take more steps than model", path, steps)
		}
		if env == "" && steps["hybrid --eager"] >= steps["hybrid"] {
			t.Errorf("%s: steps %v; recall continues the second chain, so eager hybrid must take fewer steps than hybrid", path, steps)
		}
	}
}

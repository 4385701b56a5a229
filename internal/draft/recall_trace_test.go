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
func simulate(t *testing.T, recs []traceRecord, s Guided) (steps, rows, kept, recalled int) {
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
		}
		if c, ok := d.(Counter); ok {
			kept += c.Stats().Kept
			recalled += c.Stats().Recalled
		}
	}
	return
}

// TestRecallTrace replays recorded session traces (DRAFTD_RECALL_TRACES,
// comma-separated JSON Lines of traceRecord) through model, hybrid and
// hybrid with recall, and logs steps and rows.
func TestRecallTrace(t *testing.T) {
	env := os.Getenv("DRAFTD_RECALL_TRACES")
	if env == "" {
		t.Skip("DRAFTD_RECALL_TRACES not set")
	}
	for _, path := range strings.Split(env, ",") {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var recs []traceRecord
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<26)
		for sc.Scan() {
			var r traceRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		f.Close()
		for _, v := range []struct {
			name string
			s    Guided
		}{
			{"model", Model{}},
			{"hybrid", Hybrid{Opt: Options{MinMatch: 4, Choice: Frequent}}},
			{"hybrid --eager", Hybrid{Opt: Options{MinMatch: 4, Choice: Frequent, Eager: true}}},
		} {
			steps, rows, kept, recalled := simulate(t, recs, v.s)
			t.Logf("%s %-20s requests %d steps %d rows %d extra rows %d kept %d (recalled %d)", path, v.name, len(recs), steps, rows, rows-steps, kept, recalled)
		}
	}
}

// The eval client's protocols (docs/protocol.md, batched and incremental drafting) against a real server: the same
// replay over full, session and batch gives the same τ, histogram and
// per-sample steps (the drafts are the same), session and batch send fewer
// bytes per step, and sessions evicted mid-replay (--max-sessions below the
// concurrency) are resent without changing τ.

package server

import (
	"slices"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/eval"
)

func TestReplayProtocolsSameTau(t *testing.T) {
	data := soakData(t, 8, 80)
	data[3].ID = "go/net/lookup_test.go@1875" // not a valid session id: the client must not use it as one
	for _, tc := range []struct {
		name        string
		maxSessions int
	}{{"sessions kept", 0}, {"sessions evicted", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startHealthy(t, Config{MaxSessions: tc.maxSessions})
			reports := map[string]*eval.Report{}
			for _, p := range []string{eval.ProtocolFull, eval.ProtocolSession, eval.ProtocolBatch} {
				d, err := eval.NewDrafter(eval.BackendDraftd, eval.NewHTTPClient(4), ts.URL)
				if err != nil {
					t.Fatal(err)
				}
				r, err := eval.Replay(t.Context(), d, data, eval.ReplayOptions{
					N: 8, Concurrency: 4, Timeout: time.Minute, Protocol: p, SessionPrefix: p + "-",
				})
				if err != nil {
					t.Fatal(err)
				}
				r.AddWire(d.(*eval.DraftdClient).Wire)
				if r.Failures != 0 {
					t.Fatalf("%s: %d failures (first %s)", p, r.Failures, r.FirstError)
				}
				reports[p] = r
				t.Logf("%s: τ %.4f, %d steps, %.0f bytes/step, %d HTTP requests, %d resends", p, r.Tau, r.Steps, r.BytesPerStep, r.HTTPRequests, r.Resends)
			}
			full := reports[eval.ProtocolFull]
			steps := func(r *eval.Report) map[string]int {
				m := map[string]int{}
				for _, s := range r.PerSample {
					m[s.ID] = s.Steps
				}
				return m
			}
			for _, p := range []string{eval.ProtocolSession, eval.ProtocolBatch} {
				r := reports[p]
				if r.Tau != full.Tau || !slices.Equal(r.AcceptHist, full.AcceptHist) {
					t.Errorf("%s: τ %v hist %v; full: τ %v hist %v", p, r.Tau, r.AcceptHist, full.Tau, full.AcceptHist)
				}
				ss, fs := steps(r), steps(full)
				for id, n := range fs {
					if ss[id] != n {
						t.Errorf("%s: sample %s took %d steps; full %d", p, id, ss[id], n)
					}
				}
				if r.BytesPerStep >= full.BytesPerStep {
					t.Errorf("%s: %.0f bytes per step; full sends %.0f", p, r.BytesPerStep, full.BytesPerStep)
				}
				if r.ServerParseMS <= 0 {
					t.Errorf("%s: no server parse time", p)
				}
			}
			if tc.maxSessions > 0 && reports[eval.ProtocolSession].Resends == 0 {
				t.Errorf("--max-sessions %d at concurrency 4: no session was resent", tc.maxSessions)
			}
		})
	}
}

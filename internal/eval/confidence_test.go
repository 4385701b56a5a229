// draft_ms_per_accepted (the latency of every request but each sample's
// first, over the accepted draft tokens) on a scripted replay with a fake
// clock, and the confidence fields of draftd's protocol as the client sends
// and reads them (min_confidence in every body, confidences into rows).

package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clockDrafter advances a fake clock inside each Draft: first for a
// sample's first request (its context is the prompt alone), warm for the
// others.
type clockDrafter struct {
	Drafter
	clock       *atomic.Int64 // ns
	prompts     map[string]bool
	first, warm time.Duration
}

func (d *clockDrafter) Draft(ctx context.Context, tokens []int, n int) ([]int, error) {
	if d.prompts[key(tokens)] {
		d.clock.Add(int64(d.first))
	} else {
		d.clock.Add(int64(d.warm))
	}
	return d.Drafter.Draft(ctx, tokens, n)
}

func TestDraftMSPerAccepted(t *testing.T) {
	samples, script, w := scripted()
	_, srv := newFakeServer(t, 4, script)
	inner, err := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	d := &clockDrafter{Drafter: inner, clock: &clock, first: time.Second, warm: 10 * time.Millisecond,
		prompts: map[string]bool{key(samples[0].Prompt): true, key(samples[1].Prompt): true}}
	opt := ReplayOptions{N: 4, Concurrency: 1, Timeout: time.Minute, now: func() time.Time { return time.Unix(0, clock.Load()) }}
	r, err := Replay(t.Context(), d, samples, opt)
	if err != nil {
		t.Fatal(err)
	}
	w.kinds = nil // not this test's
	check(t, r, w)
	// A: three requests (the first carries the prompt), accepted 2, 0, 1;
	// B: one request (its first), accepted 3. Warm latency: 2 × 10 ms over
	// 6 accepted tokens; 15 drafted tokens.
	if r.AcceptedTokens != 6 || math.Abs(r.DraftMSPerAccepted-20.0/6) > 1e-9 || math.Abs(r.DraftedPerAccepted-15.0/6) > 1e-12 {
		t.Errorf("accepted %d, draft_ms_per_accepted %v, drafted_per_accepted %v; want 6, %v, %v",
			r.AcceptedTokens, r.DraftMSPerAccepted, r.DraftedPerAccepted, 20.0/6, 15.0/6)
	}
	var text strings.Builder
	r.WriteText(&text)
	if !strings.Contains(text.String(), "draft ms per accepted token 3.33") {
		t.Errorf("text report without draft ms per accepted token beside τ:\n%s", text.String())
	}
	b, _ := json.Marshal(r)
	var m map[string]any
	json.Unmarshal(b, &m)
	if v, ok := m["draft_ms_per_accepted"].(float64); !ok || math.Abs(v-20.0/6) > 1e-9 {
		t.Errorf("JSON draft_ms_per_accepted = %v", m["draft_ms_per_accepted"])
	}
}

// confServer answers every protocol with a draft of n tokens equal to the
// continuation except at position bad, with confidences 1 − i/10, and
// records the bodies.
type confServer struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func (c *confServer) handler(cont map[string][]int) http.Handler {
	answer := func(item map[string]any) map[string]any {
		n := int(item["n"].(float64))
		// the sample is named by its session or its first prompt token
		var next []int
		if toks, ok := item["tokens"].([]any); ok {
			next = cont[fmt.Sprint(toks[0])]
		} else {
			next = cont["s"]
		}
		d := slices.Clone(next[:min(n, len(next))])
		if len(d) > 1 {
			d[1] = 999 // accepted length ≤ 1
		}
		out := map[string]any{"draft": d}
		if item["confidences"] == true {
			cf := make([]float64, len(d))
			for i := range cf {
				cf[i] = 1 - float64(i)/10
			}
			out["confidences"] = cf
		}
		return out
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"status":"ok"}`) })
	mux.HandleFunc("POST /draft", func(w http.ResponseWriter, r *http.Request) {
		var item map[string]any
		json.NewDecoder(r.Body).Decode(&item)
		c.mu.Lock()
		c.bodies = append(c.bodies, item)
		c.mu.Unlock()
		json.NewEncoder(w).Encode(answer(item))
	})
	mux.HandleFunc("POST /v1/drafts", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Requests []map[string]any `json:"requests"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var out []map[string]any
		for _, it := range req.Requests {
			c.mu.Lock()
			c.bodies = append(c.bodies, it)
			c.mu.Unlock()
			out = append(out, answer(it))
		}
		json.NewEncoder(w).Encode(map[string]any{"drafts": out})
	})
	return mux
}

func TestMinConfidenceSentAndRows(t *testing.T) {
	sample := Sample{ID: "s", Prompt: []int{5}, Continuation: []int{10, 11, 12, 13, 14, 15}}
	for _, p := range []string{ProtocolFull, ProtocolSession, ProtocolBatch} {
		t.Run(p, func(t *testing.T) {
			cs := &confServer{}
			srv := httptest.NewServer(cs.handler(map[string][]int{"5": sample.Continuation}))
			defer srv.Close()
			d, err := NewDrafter(BackendDraftd, NewHTTPClient(1), srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			d.(*DraftdClient).MinConfidence = 0.25
			var mu sync.Mutex
			var rows []ConfidenceRow
			opt := ReplayOptions{N: 3, Concurrency: 1, Timeout: time.Minute, Protocol: p, SessionPrefix: "s"}
			if p != ProtocolBatch {
				opt.Confidences = func(r ConfidenceRow) { mu.Lock(); rows = append(rows, r); mu.Unlock() }
			}
			r, err := Replay(t.Context(), d, []Sample{sample}, opt)
			if err != nil {
				t.Fatal(err)
			}
			if len(cs.bodies) == 0 {
				t.Fatal("no request")
			}
			for i, b := range cs.bodies {
				if b["min_confidence"] != 0.25 {
					t.Errorf("request %d: min_confidence %v; want 0.25", i, b["min_confidence"])
				}
				if (b["confidences"] == true) != (p != ProtocolBatch) {
					t.Errorf("request %d: confidences %v", i, b["confidences"])
				}
			}
			if p == ProtocolBatch {
				return
			}
			// The first step: draft 10 999 12 after the prompt: accepted 1.
			if len(rows) < 3 || rows[0] != (ConfidenceRow{Sample: "s", Step: 0, Position: 0, Confidence: 1, Accepted: true}) ||
				rows[1] != (ConfidenceRow{Sample: "s", Step: 0, Position: 1, Confidence: 0.9, Accepted: false}) ||
				rows[2].Position != 2 || rows[2].Accepted || math.Abs(rows[2].Confidence-0.8) > 1e-12 {
				t.Errorf("rows %+v", rows)
			}
			if int64(len(rows)) != r.DraftTokens {
				t.Errorf("%d rows for %d draft tokens", len(rows), r.DraftTokens)
			}
		})
	}
}

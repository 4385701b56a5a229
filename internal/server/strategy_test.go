// Tests of strategy selection over real sockets: the server's default, the
// per-request "strategy" field, its errors, /v1/info and the source metrics.
package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/eval"
)

func TestStrategySelection(t *testing.T) {
	ts := startHealthy(t, Config{Open: tinyOpen(engine.Options{Strategy: draft.Hybrid{Opt: draft.DefaultOptions()}}, nil)})
	m := loadModel(t)

	st, _, b := ts.do("GET", "/v1/info", "")
	var in struct {
		Strategy   string   `json:"strategy"`
		Strategies []string `json:"strategies"`
	}
	if err := json.Unmarshal(b, &in); st != http.StatusOK || err != nil || in.Strategy != "hybrid" || !slices.Contains(in.Strategies, "lookup") {
		t.Fatalf("GET /v1/info: %d %s (%v)", st, b, err)
	}

	post := func(body string) []int {
		t.Helper()
		st, _, b := ts.do("POST", "/draft", body)
		if st != http.StatusOK {
			t.Fatalf("POST /draft %s: %d %s", body, st, b)
		}
		return decodeDraft(t, b)
	}
	ctx := []int{5, 1, 2, 3, 4, 9, 1, 2, 3}
	if have, want := post(`{"tokens":`+idsJSON(ctx)+`,"n":3,"strategy":"lookup"}`), []int{4, 9, 1}; !slices.Equal(have, want) {
		t.Errorf("lookup: have %v; want %v", have, want)
	}
	want, err := m.Generate(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	if have := post(`{"tokens":` + idsJSON(ctx) + `,"n":6,"strategy":"model"}`); !slices.Equal(have, want) {
		t.Errorf("model: have %v; want Generate's %v", have, want)
	}
	h1 := post(`{"tokens":` + idsJSON(ctx) + `,"n":6}`)
	h2 := post(`{"tokens":` + idsJSON(ctx) + `,"n":6,"strategy":"hybrid"}`)
	if len(h1) != 6 || !slices.Equal(h1, h2) {
		t.Errorf("hybrid (default, then named, cache warm): %v, %v", h1, h2)
	}

	for _, body := range []string{
		`{"tokens":[1,2],"strategy":"ngram"}`,
		`{"tokens":[1,2],"strategy":""}`, // empty is not a name (issue 20)
		`{"tokens":[1,2],"strategy":3}`,
		`{"tokens":[1,2],"strategy":["lookup"]}`,
	} {
		st, h, b := ts.do("POST", "/draft", body)
		checkError(t, st, h, b, http.StatusBadRequest, CodeInvalidStrategy, "strategy")
	}

	fams := scrape(t, ts)
	if v, _ := value(fams, "draftd_draft_tokens_by_source_total", "source", "lookup"); v < 3 {
		t.Errorf("lookup draft tokens counted: %v; want ≥ 3", v)
	}
	if v, _ := value(fams, "draftd_draft_tokens_by_source_total", "source", "model"); v < 6 {
		t.Errorf("model draft tokens counted: %v; want ≥ 6", v)
	}
	for _, o := range []string{"kept", "rejected"} {
		if _, ok := value(fams, "draftd_lookup_proposal_tokens_total", "outcome", o); !ok {
			t.Errorf("draftd_lookup_proposal_tokens_total{outcome=%q} missing", o)
		}
	}
}

// TestEvalClientStrategy: `draftd eval --strategy` (eval.DraftdClient.Strategy)
// names the strategy in each request: the answers are those of lookup
// (hand-computed) and of the model's own greedy chain, not the server's
// default hybrid, and a bad name comes back as the server's error.
func TestEvalClientStrategy(t *testing.T) {
	ts := startHealthy(t, Config{Open: tinyOpen(engine.Options{Strategy: draft.Hybrid{Opt: draft.DefaultOptions()}}, nil)})
	m := loadModel(t)
	hc := eval.NewHTTPClient(1)
	defer hc.CloseIdleConnections()
	ctx := []int{5, 1, 2, 3, 4, 9, 1, 2, 3}
	greedy, err := m.Generate(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strategy string
		n        int
		want     []int
	}{
		{"lookup", 3, []int{4, 9, 1}},
		{"model", 6, greedy},
	} {
		c := &eval.DraftdClient{HTTP: hc, URL: ts.URL, Strategy: tc.strategy}
		have, err := c.Draft(t.Context(), ctx, tc.n)
		if err != nil || !slices.Equal(have, tc.want) {
			t.Errorf("Strategy %q: have %v (%v); want %v", tc.strategy, have, err, tc.want)
		}
	}
	c := &eval.DraftdClient{HTTP: hc, URL: ts.URL, Strategy: `ngram"`}
	var se *eval.StatusError
	if _, err := c.Draft(t.Context(), ctx, 3); !errors.As(err, &se) || se.Status != http.StatusBadRequest || se.Code != CodeInvalidStrategy {
		t.Errorf(`Strategy "ngram\"": have %v; want a 400 %s`, err, CodeInvalidStrategy)
	}
}

// Tests of POST /v1/drafts (docs/protocol.md, batched and incremental drafting) on a real server over loopback: every
// item equals the single /draft answer for its body, a bad item fails only
// itself with §1's codes, and a malformed envelope is a 400 for the call.

package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/draftd/draftd/internal/engine"
)

// batchResult is one RESULT of a /v1/drafts answer.
type batchResult struct {
	ID    *string `json:"id"`
	Draft *[]int  `json:"draft"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// postBatch sends a /v1/drafts body and decodes a 200 answer.
func (ts *testServer) postBatch(body string, header ...string) []batchResult {
	ts.t.Helper()
	req, err := http.NewRequest("POST", ts.URL+"/v1/drafts", strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	st, h, b := ts.send(req)
	if st != http.StatusOK {
		ts.t.Fatalf("POST /v1/drafts: status %d: %s", st, b)
	}
	if !strings.HasPrefix(h.Get("Server-Timing"), "parse;dur=") {
		ts.t.Errorf("Server-Timing: have %q; want parse;dur=…", h.Get("Server-Timing"))
	}
	var out struct {
		Drafts []batchResult `json:"drafts"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		ts.t.Fatalf("bad /v1/drafts answer %q: %v", b, err)
	}
	return out.Drafts
}

func TestBatchItemsEqualDraft(t *testing.T) {
	ts := startHealthy(t, Config{})
	r := rand.New(rand.NewPCG(7, 8))
	type item struct {
		body     string
		id       string // "" : none
		tokens   []int
		n        int
		strategy string
		code     string // the item's error code; "" : a draft
	}
	var items []item
	for i := range 40 {
		it := item{tokens: randIDs(r, 1+r.IntN(120)), n: 1 + r.IntN(24), strategy: []string{"", "model", "lookup", "hybrid"}[r.IntN(4)]}
		if i%3 != 0 {
			it.id = fmt.Sprintf("item-%d", i)
		}
		fields := []string{`"tokens":` + idsJSON(it.tokens), fmt.Sprintf(`"n":%d`, it.n)}
		if it.id != "" {
			fields = append(fields, fmt.Sprintf(`"id":%q`, it.id))
		}
		if it.strategy != "" {
			fields = append(fields, fmt.Sprintf(`"strategy":%q`, it.strategy))
		}
		switch i {
		case 4:
			fields[0] = `"tokens":[1,2,512]`
			it.code = CodeTokenOutOfRange
		case 9:
			fields[1] = `"n":0`
			it.code = CodeInvalidN
		case 13:
			fields = append(fields, `"strategy":"nope"`)
			it.code = CodeInvalidStrategy
		case 17:
			fields[0] = `"tokens":[]`
			it.code = CodeMissingTokens
		case 21:
			fields[0] = `"tokens":` + idsJSON(make([]int, tinyMax))
			it.code = CodeContextTooLong
		case 25:
			fields[0] = `"tokens":[1,2.5]`
			it.code = CodeInvalidToken
		}
		it.body = "{" + strings.Join(fields, ",") + "}"
		items = append(items, it)
	}
	// Not an object, and an id that is not a string: item errors too.
	items = append(items, item{body: `[1,2,3]`, code: CodeInvalidRequest}, item{body: `{"tokens":[1],"id":7}`, code: CodeInvalidRequest})
	bodies := make([]string, len(items))
	for i, it := range items {
		bodies[i] = it.body
	}
	got := ts.postBatch(`{"requests":[` + strings.Join(bodies, ",") + `]}`)
	if len(got) != len(items) {
		t.Fatalf("have %d results; want %d", len(got), len(items))
	}
	for i, it := range items {
		g := got[i]
		switch {
		case it.id == "" && g.ID != nil:
			t.Errorf("item %d: id %q; want null", i, *g.ID)
		case it.id != "" && (g.ID == nil || *g.ID != it.id):
			t.Errorf("item %d: id %v; want %q", i, g.ID, it.id)
		}
		if it.code != "" {
			if g.Error == nil || g.Error.Code != it.code || g.Error.Message == "" || g.Draft != nil {
				t.Errorf("item %d (%s): have %+v; want error %s", i, it.body[:min(40, len(it.body))], g, it.code)
			}
			continue
		}
		if g.Error != nil || g.Draft == nil {
			t.Errorf("item %d: have error %+v; want a draft", i, g.Error)
			continue
		}
		// The reference: the same body alone at /draft.
		st, _, b := ts.do("POST", "/draft", it.body)
		if st != http.StatusOK {
			t.Fatalf("item %d alone: status %d %s", i, st, b)
		}
		if want := decodeDraft(t, b); !slices.Equal(*g.Draft, want) {
			t.Errorf("item %d: batch draft %v; /draft %v", i, *g.Draft, want)
		}
	}
	fams := scrape(t, ts)
	if v, _ := value(fams, "draftd_batch_items"); v != 1 {
		t.Errorf("draftd_batch_items observations: have %v; want 1", v)
	}
	if v, _ := value(fams, "draftd_request_parse_seconds", "route", "/v1/drafts"); v != 1 {
		t.Errorf("draftd_request_parse_seconds{route=/v1/drafts}: have %v; want 1", v)
	}
}

func TestBatchEnvelope(t *testing.T) {
	ts := startHealthy(t, Config{MaxBatchItems: 3, MaxBodyBytes: 4096})
	one := `{"tokens":[1,2,3]}`
	for _, tc := range []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"empty", ``, 400, CodeInvalidJSON, "empty"},
		{"not JSON", `{"requests":[`, 400, CodeInvalidJSON, "invalid JSON"},
		{"array", `[` + one + `]`, 400, CodeInvalidJSON, "must be a JSON object"},
		{"no requests", `{"tokens":[1,2,3]}`, 400, CodeInvalidRequest, `missing "requests"`},
		{"null requests", `{"requests":null}`, 400, CodeInvalidRequest, `missing "requests"`},
		{"requests not array", `{"requests":{"tokens":[1]}}`, 400, CodeInvalidRequest, "must be an array"},
		{"no items", `{"requests":[]}`, 400, CodeInvalidRequest, "empty"},
		{"too many", `{"requests":[` + strings.Repeat(one+",", 3) + one + `]}`, 400, CodeTooManyItems, "--max-batch-items"},
		{"over body limit", `{"requests":[{"tokens":` + idsJSON(seq(100, 1500)) + `}]}`, 413, CodeBodyTooLarge, "--max-body-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, h, b := ts.do("POST", "/v1/drafts", tc.body)
			checkError(t, st, h, b, tc.status, tc.code, tc.msg)
		})
	}
	// At the limit it is served.
	if got := ts.postBatch(`{"requests":[` + one + "," + one + "," + one + `]}`); len(got) != 3 || got[2].Draft == nil {
		t.Errorf("3 items at --max-batch-items 3: have %+v", got)
	}
	st, h, b := ts.do("GET", "/v1/drafts", "")
	checkError(t, st, h, b, 405, CodeMethodNotAllowed, "POST")
}

func randIDs(r *rand.Rand, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = r.IntN(tinyVocab)
	}
	return s
}

// FuzzParseBatch checks the envelope parser on any bytes: no panic, an error
// is a 400 RequestError, and an accepted envelope has 1..max items each
// either failed with a 400 or holding a valid draft request whose tokens
// equal parseDraftRequest's for the same item bytes.
func FuzzParseBatch(f *testing.F) {
	for _, s := range []string{
		`{"requests":[{"tokens":[1,2,3],"n":4,"id":"a"}]}`, `{"requests":[]}`, `{"requests":null}`, `{"requests":{}}`,
		`{"requests":[1,"x",[],{"tokens":[1]}]}`, `{"requests":[{"session":"s","accepted":1,"bonus":2}]}`, `[]`, ``, `{`,
		`{"requests":[{"tokens":[1]},{"tokens":[2]},{"tokens":[3]},{"tokens":[4]},{"tokens":[5]}]}`, `{"requests":[{"id":7,"tokens":[1]}],"x":1}`,
	} {
		f.Add([]byte(s))
	}
	const maxItems = 4
	f.Fuzz(func(t *testing.T, body []byte) {
		reqs, errs, err := parseBatch(body, testLimits, maxItems)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || apiErrorFor(err).Status != 400 || re.Message == "" {
				t.Fatalf("%q: envelope error %v; want a 400 RequestError", body, err)
			}
			return
		}
		if len(reqs) < 1 || len(reqs) > maxItems || len(errs) != len(reqs) {
			t.Fatalf("%q: %d items, %d errors", body, len(reqs), len(errs))
		}
		for i, e := range errs {
			if e != nil {
				if apiErrorFor(e).Status != 400 {
					t.Fatalf("%q: item %d error %v is not a 400", body, i, e)
				}
				continue
			}
			if !reqs[i].Incremental && (len(reqs[i].Tokens) == 0 || len(reqs[i].Tokens) >= testLimits.MaxContext) {
				t.Fatalf("%q: item %d accepted with %d tokens", body, i, len(reqs[i].Tokens))
			}
		}
	})
}

// TestBatchItemsFollowQueue: a call is queued whole, so the default item
// limit follows a smaller --max-queue, and a larger explicit one is refused
// at start-up.
func TestBatchItemsFollowQueue(t *testing.T) {
	ts := startHealthy(t, Config{Open: tinyOpen(engine.Options{MaxQueue: 2}, nil)})
	st, h, b := ts.do("POST", "/v1/drafts", `{"requests":[{"tokens":[1]},{"tokens":[2]},{"tokens":[3]}]}`)
	checkError(t, st, h, b, 400, CodeTooManyItems, "limit of 2")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{MaxBatchItems: 3, Open: tinyOpen(engine.Options{MaxQueue: 2}, nil), Logger: slog.New(slog.DiscardHandler)}
	if err := Run(context.Background(), ln, cfg); err == nil || !strings.Contains(err.Error(), "max batch items 3") {
		t.Errorf("Run with 3 batch items over a queue of 2: have %v; want a config error", err)
	}
}

// TestBatchIDInvalidUTF8: an item "id" holding bytes that are not UTF-8 is
// echoed as encoding/json reads it (each bad byte U+FFFD): the answer is
// valid UTF-8 JSON.
func TestBatchIDInvalidUTF8(t *testing.T) {
	ts := startHealthy(t, Config{})
	id := "a\xffb\xc3"
	body := `{"requests":[{"id":"` + id + `","tokens":[1,2,3],"n":2},{"id":"` + id + `","tokens":[]}]}`
	st, _, b := ts.do("POST", "/v1/drafts", body)
	if st != http.StatusOK {
		t.Fatalf("status %d %s", st, b)
	}
	if !utf8.Valid(b) {
		t.Errorf("answer is not valid UTF-8: %q", b)
	}
	var want string
	json.Unmarshal([]byte(`"`+id+`"`), &want)
	var out struct {
		Drafts []struct {
			ID string `json:"id"`
		} `json:"drafts"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Drafts) != 2 {
		t.Fatalf("answer %q: %v", b, err)
	}
	for i, d := range out.Drafts {
		if d.ID != want {
			t.Errorf("item %d: id %q; want %q", i, d.ID, want)
		}
	}
}

// Tests of the POST /draft body parser alone: a table of decisions and a
// fuzz test that checks it against an independent reading of the same rules
// (encoding/json with UseNumber) and against its own invariants.

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/session"
)

var testLimits = limits{Rules: engine.Rules{Vocab: 512, MaxContext: 256, MaxDraftLen: 64}, DraftLen: 16}

func TestParseDraftRequest(t *testing.T) {
	cases := []struct {
		body   string
		tokens []int
		n, fit int
		code   string
	}{
		{body: `{"tokens":[1,2,3]}`, tokens: []int{1, 2, 3}, n: 16, fit: 16},
		{body: `{"tokens":[0,511],"n":64}`, tokens: []int{0, 511}, n: 64, fit: 64},
		{body: `{"tokens":[-0],"n":1}`, tokens: []int{0}, n: 1, fit: 1},
		{body: "\n{\"input_ids\" : [ 7 , 8 ] , \"num_draft_tokens\" : 2 }\t", tokens: []int{7, 8}, n: 2, fit: 2},
		{body: `{"tokens":[1],"input_ids":[1],"token_ids":[1],"prompt_token_ids":[1]}`, tokens: []int{1}, n: 16, fit: 16},
		{body: `{"tokens":` + idsJSON(seq(0, 250)) + `}`, tokens: seq(0, 250), n: 16, fit: 6},
		{body: `{"tokens":` + idsJSON(seq(0, 255)) + `,"n":3}`, tokens: seq(0, 255), n: 3, fit: 1},
		{body: `{"tokens":[1],"n":null}`, tokens: []int{1}, n: 16, fit: 16},
		{body: `{"tokens":[1],"extra":{"a":[1.5,"x"]}}`, tokens: []int{1}, n: 16, fit: 16},
		{body: `{"tokens":[1],"Tokens":[2]}`, tokens: []int{1}, n: 16, fit: 16}, // keys are case-sensitive
		{body: `{"tokens":[1],"tokens":[2]}`, tokens: []int{2}, n: 16, fit: 16}, // the last duplicate wins, as in encoding/json
		{body: `{"Tokens":[1]}`, code: CodeMissingTokens},
		{body: `{"tokens":[1],"n":1E1}`, code: CodeInvalidN},
		{body: `{"tokens":[1,]}`, code: CodeInvalidJSON},
		{body: `{"tokens":[01]}`, code: CodeInvalidJSON},
		{body: `{"tokens":[+1]}`, code: CodeInvalidJSON},
		{body: `{"tokens":[1]`, code: CodeInvalidJSON},
		{body: `{"tokens":[9223372036854775808]}`, code: CodeTokenOutOfRange},
		{body: `{"tokens":[-9223372036854775809]}`, code: CodeTokenOutOfRange},
		{body: `{"tokens":[1],"input_ids":[1,2]}`, code: CodeInvalidRequest},
		{body: `{"tokens":[1],"input_ids":"x"}`, code: CodeInvalidRequest},
		{body: `{"tokens":[1],"input_ids":[-1]}`, code: CodeTokenOutOfRange},
	}
	for _, c := range cases {
		req, err := parseDraftRequest([]byte(c.body), testLimits)
		name := c.body[:min(len(c.body), 60)]
		if c.code != "" {
			var re *RequestError
			if !errors.As(err, &re) || re.Code != c.code {
				t.Errorf("%s: have error %v; want code %s", name, err, c.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !slices.Equal(req.Tokens, c.tokens) || req.N != c.n || req.Fit != c.fit {
			t.Errorf("%s: have %v n %d fit %d; want %v n %d fit %d", name, req.Tokens, req.N, req.Fit, c.tokens, c.n, c.fit)
		}
	}
}

func TestAppendDraft(t *testing.T) {
	for _, ids := range [][]int{{}, {0}, {1, 22, 151935}} {
		var out struct{ Draft []int }
		b := appendDraft(nil, ids, nil)
		if err := json.Unmarshal(b, &out); err != nil || !slices.Equal(out.Draft, ids) || out.Draft == nil {
			t.Errorf("appendDraft(%v) = %s (%v)", ids, b, err)
		}
	}
}

// referenceParse reads a body by the same rules as parseDraftRequest, via
// encoding/json's generic decoding, and returns the tokens and n or the
// error code.
func referenceParse(body []byte, lim limits) (tokens []int, n int, code string) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, 0, CodeInvalidJSON
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, 0, CodeInvalidJSON
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, 0, CodeInvalidJSON // trailing data
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, 0, CodeInvalidJSON
	}
	integer := func(x any) (int64, string) {
		num, ok := x.(json.Number)
		if !ok {
			return 0, "type"
		}
		if strings.ContainsAny(string(num), ".eE") {
			return 0, "fraction"
		}
		i, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return 0, "range"
		}
		return i, ""
	}
	present := func(k string) bool { x, ok := obj[k]; return ok && x != nil }
	if present("id") {
		if _, ok := obj["id"].(string); !ok {
			return nil, 0, CodeInvalidRequest
		}
	}
	if present("min_confidence") {
		num, ok := obj["min_confidence"].(json.Number)
		if !ok {
			return nil, 0, CodeInvalidRequest
		}
		if v, err := strconv.ParseFloat(string(num), 32); err != nil || v < 0 || v > 1 {
			return nil, 0, CodeInvalidRequest
		}
	}
	if present("confidences") {
		if _, ok := obj["confidences"].(bool); !ok {
			return nil, 0, CodeInvalidRequest
		}
	}
	nOf := func() (int, string) {
		n, seen := lim.DraftLen, false
		for _, name := range nFields {
			if !present(name) {
				continue
			}
			i, why := integer(obj[name])
			if why != "" || i < 1 || i > int64(lim.MaxDraftLen) {
				return 0, CodeInvalidN
			}
			if !seen {
				n, seen = int(i), true
			} else if int(i) != n {
				return 0, CodeInvalidRequest
			}
		}
		return n, ""
	}
	if present("session") || present("accepted") || present("bonus") {
		id, ok := obj["session"].(string)
		if !present("session") || !ok || !session.ValidID(id) {
			return nil, 0, CodeInvalidRequest
		}
		hasTokens := false
		for _, name := range tokenFields {
			hasTokens = hasTokens || present(name)
		}
		switch {
		case hasTokens && (present("accepted") || present("bonus")):
			return nil, 0, CodeInvalidRequest
		case !hasTokens && (!present("accepted") || !present("bonus")):
			return nil, 0, CodeInvalidRequest
		case !hasTokens:
			if k, why := integer(obj["accepted"]); why != "" || k < 0 {
				return nil, 0, CodeInvalidAccepted
			}
			// "bonus": an id, or a non-empty array of ids (the first bad one decides).
			bonus, isArr := obj["bonus"].([]any)
			if !isArr {
				bonus = []any{obj["bonus"]}
			} else if len(bonus) == 0 {
				return nil, 0, CodeInvalidToken
			}
			for _, e := range bonus {
				b, why := integer(e)
				switch {
				case why == "type" || why == "fraction":
					return nil, 0, CodeInvalidToken
				case why == "range" || b < 0 || b >= int64(lim.Vocab):
					return nil, 0, CodeTokenOutOfRange
				}
			}
			n, code := nOf()
			return nil, n, code
		}
	}
	var first []int
	seen := false
	for _, name := range tokenFields {
		x, ok := obj[name]
		if !ok || x == nil {
			continue
		}
		arr, ok := x.([]any)
		if !ok {
			return nil, 0, CodeInvalidRequest
		}
		ids := []int{}
		for _, e := range arr {
			i, why := integer(e)
			switch {
			case why == "type" || why == "fraction":
				return nil, 0, CodeInvalidToken
			case why == "range" || i < 0 || i >= int64(lim.Vocab):
				return nil, 0, CodeTokenOutOfRange
			}
			ids = append(ids, int(i))
		}
		if !seen {
			first, seen = ids, true
		} else if !slices.Equal(ids, first) {
			return nil, 0, CodeInvalidRequest
		}
	}
	switch {
	case !seen || len(first) == 0:
		return nil, 0, CodeMissingTokens
	case len(first) >= lim.MaxContext:
		return nil, 0, CodeContextTooLong
	}
	if n, code = nOf(); code != "" {
		return nil, 0, code
	}
	return first, n, ""
}

func FuzzParseDraftRequest(f *testing.F) {
	for _, s := range []string{
		`{"tokens":[1,2,3],"n":4}`, `{"input_ids":[0],"num_draft_tokens":64}`, `{"tokens":[1.5]}`,
		`{"tokens":["3"]}`, `{"tokens":[1e3]}`, `{"tokens":[-1]}`, `{"tokens":[512]}`, `{"tokens":[]}`,
		`{"tokens":[1],"input_ids":[2]}`, `{"tokens":[1],"n":0}`, `{"n":3}`, `[1]`, `null`, ``, `{`,
		`{"tokens":[1]} {}`, `{"tokens":[ 1 , 2 ],"n":null,"x":{"y":[]}}`, `{"prompt_token_ids":[99999999999999999999]}`,
		`{"tokens":` + idsJSON(seq(0, 255)) + `,"n":2}`, `{"tokens":` + idsJSON(seq(0, 256)) + `}`,
		`{"session":"a.b:c-1","tokens":[1,2]}`, `{"session":"s","accepted":2,"bonus":7,"n":3}`, `{"session":"s","accepted":-1,"bonus":7}`,
		`{"session":"s","accepted":1}`, `{"session":"","tokens":[1]}`, `{"accepted":1,"bonus":2}`, `{"session":"s","accepted":1,"bonus":512}`,
		`{"session":"s","tokens":[1],"bonus":1}`, `{"session":"s"}`, `{"tokens":[1],"id":"x"}`, `{"tokens":[1],"id":3}`, `{"session":"s\u0041","tokens":[1]}`,
		`{"tokens":[1],"min_confidence":0.3}`, `{"tokens":[1],"min_confidence":0}`, `{"tokens":[1],"min_confidence":1}`,
		`{"tokens":[1],"min_confidence":1.0000001}`, `{"tokens":[1],"min_confidence":-0.1}`, `{"tokens":[1],"min_confidence":"0.3"}`,
		`{"tokens":[1],"min_confidence":1e-400}`, `{"tokens":[1],"min_confidence":3e-1,"confidences":true}`, `{"tokens":[1],"min_confidence":null}`,
		`{"tokens":[1],"confidences":false}`, `{"tokens":[1],"confidences":1}`, `{"tokens":[1],"confidences":"true"}`,
		`{"session":"s","accepted":1,"bonus":2,"min_confidence":0.5,"confidences":true}`, `{"min_confidence":2}`,
		`{"session":"s","accepted":0,"bonus":[3,4,5],"n":2}`, `{"session":"s","accepted":0,"bonus":[]}`,
		`{"session":"s","accepted":0,"bonus":[3,512]}`, `{"session":"s","accepted":0,"bonus":[3,"4"]}`, `{"session":"s","accepted":0,"bonus":[[1]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseDraftRequest(body, testLimits)
		wantTokens, wantN, wantCode := referenceParse(body, testLimits)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			if re.Message == "" {
				t.Fatalf("empty message for code %s", re.Code)
			}
			if ae := apiErrorFor(err); ae.Status != 400 {
				t.Fatalf("code %s maps to status %d; want 400", re.Code, ae.Status)
			}
			if re.Code != wantCode {
				t.Fatalf("%q: code %s (%s); reference says %q", body, re.Code, re.Message, wantCode)
			}
			return
		}
		if wantCode != "" {
			t.Fatalf("%q: accepted; reference says %s", body, wantCode)
		}
		if !slices.Equal(req.Tokens, wantTokens) || req.N != wantN {
			t.Fatalf("%q: have %v n %d; reference %v n %d", body, req.Tokens, req.N, wantTokens, wantN)
		}
		if !(req.MinConfidence >= 0 && req.MinConfidence <= 1) || !req.HasMinConfidence && req.MinConfidence != 0 {
			t.Fatalf("%q: min_confidence %v (given %v)", body, req.MinConfidence, req.HasMinConfidence)
		}
		if req.Incremental {
			if req.Session == "" || req.Accepted < 0 || req.Bonus < 0 || req.Bonus >= testLimits.Vocab || req.N < 1 {
				t.Fatalf("%q: incremental request broken: %+v", body, req)
			}
			for _, id := range req.More {
				if id < 0 || id >= testLimits.Vocab {
					t.Fatalf("%q: bonus id %d out of range", body, id)
				}
			}
			return
		}
		if len(req.Tokens) == 0 || len(req.Tokens) >= testLimits.MaxContext ||
			req.N < 1 || req.N > testLimits.MaxDraftLen ||
			req.Fit < 1 || req.Fit > req.N || len(req.Tokens)+req.Fit > testLimits.MaxContext {
			t.Fatalf("%q: invariants broken: %d tokens, n %d, fit %d", body, len(req.Tokens), req.N, req.Fit)
		}
		for _, id := range req.Tokens {
			if id < 0 || id >= testLimits.Vocab {
				t.Fatalf("%q: id %d out of range", body, id)
			}
		}
	})
}

package main

// docs/protocol.md checked against a real `draftd serve`: every `$ curl`
// example of the page is sent to the server and its answer compared with the
// one the page shows; the error table's codes and statuses, the body's field
// table, the /v1/info field table and the /metrics table are compared with
// what the server answers and with the names the server and engine define;
// and draftd eval's client is run against the same server.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testmodel"
)

// curlExample is one `$ curl ...` line of the page and the answer shown
// under it.
type curlExample struct {
	line   int
	method string
	path   string
	body   string
	want   string
}

// shellWords splits a command line as sh would for the quoting the page
// uses ('...' and "..." without escapes inside single quotes).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

func curlExamples(t *testing.T, p *docPage) []curlExample {
	t.Helper()
	var out []curlExample
	for i := 0; i < len(p.lines); i++ {
		l := p.lines[i]
		if !p.code[i] || !strings.HasPrefix(l, "$ curl ") {
			continue
		}
		words, err := shellWords(strings.TrimPrefix(l, "$ "))
		if err != nil {
			t.Fatalf("%s:%d: %v", p.path, i+1, err)
		}
		ex := curlExample{line: i + 1, method: "GET"}
		for w := 1; w < len(words); w++ {
			switch words[w] {
			case "-s", "-i":
			case "-X":
				w++
				ex.method = words[w]
			case "-d":
				w++
				ex.body = words[w]
				if ex.method == "GET" {
					ex.method = "POST"
				}
			default:
				u := strings.TrimPrefix(words[w], "http://")
				_, path, ok := strings.Cut(u, "/")
				if !ok || !strings.HasPrefix(u, "localhost:8080") {
					t.Fatalf("%s:%d: unexpected curl argument %q", p.path, i+1, words[w])
				}
				ex.path = "/" + path
			}
		}
		var want []string
		for i+1 < len(p.lines) && p.code[i+1] && !strings.HasPrefix(p.lines[i+1], "$ ") && !fence.MatchString(p.lines[i+1]) {
			i++
			want = append(want, p.lines[i])
		}
		ex.want = strings.Join(want, "\n")
		out = append(out, ex)
	}
	return out
}

// tableRows returns the cells of the table rows under the heading whose text
// is title (up to the next heading), the separator row excepted.
func tableRows(p *docPage, title string) [][]string {
	var rows [][]string
	for hi, h := range p.headings {
		if h.text != title {
			continue
		}
		end := len(p.lines)
		if hi+1 < len(p.headings) {
			end = p.headings[hi+1].line
		}
		for i := h.line + 1; i < end; i++ {
			l := strings.TrimSpace(p.lines[i])
			if p.code[i] || !strings.HasPrefix(l, "|") {
				continue
			}
			cells := strings.Split(strings.Trim(l, "|"), "|")
			if strings.Trim(cells[0], " -:") == "" {
				continue
			}
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			rows = append(rows, cells)
		}
		return rows[1:] // the header row
	}
	return nil
}

var backticked = regexp.MustCompile("`([^`]+)`")

func codesIn(cell string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// definedCodes reads the error codes the server and engine define
// (`CodeX = "..."`), from their source.
func definedCodes(t *testing.T) []string {
	re := regexp.MustCompile(`(?m)^\s*Code[A-Za-z]+\s*=\s*"([a-z_]+)"`)
	var codes []string
	for _, f := range []string{"internal/server/errors.go", "internal/engine/engine.go"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(data), -1) {
			codes = append(codes, m[1])
		}
	}
	if len(codes) < 15 {
		t.Fatalf("found %d error codes in the source; the declarations changed?", len(codes))
	}
	return codes
}

func keysOf(t *testing.T, what string, b []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: not a JSON object: %v\n%s", what, err, b)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestProtocolDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("builds draftd and serves a model")
	}
	p := readPage(t, "docs/protocol.md")

	// The error table: code → status, and every code the server can send.
	status := map[string]int{}
	for _, row := range tableRows(p, "Errors") {
		st, err := strconv.Atoi(strings.Trim(row[0], "`"))
		if err != nil {
			t.Fatalf("errors table: status cell %q", row[0])
		}
		for _, c := range codesIn(row[1]) {
			status[c] = st
		}
	}
	// The body's fields: every name the parser reads (request.go's
	// tokenFields and nFields, and "strategy") is in the field table.
	src, err := os.ReadFile(filepath.Join(repoRoot, "internal/server/request.go"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed []string
	for _, m := range regexp.MustCompile(`(?m)^var (?:tokenFields|nFields) = \[\.\.\.\]string\{(.*)\}`).FindAllStringSubmatch(string(src), -1) {
		for _, q := range regexp.MustCompile(`"([a-z_]+)"`).FindAllStringSubmatch(m[1], -1) {
			parsed = append(parsed, q[1])
		}
	}
	if len(parsed) < 4 {
		t.Fatalf("found the fields %v in request.go; the declarations changed?", parsed)
	}
	var fieldTable string
	for _, row := range tableRows(p, "`POST /draft`") {
		fieldTable += strings.Join(row, "|") + "\n"
	}
	for _, f := range append(parsed, "strategy") {
		if !strings.Contains(fieldTable, "`"+f+"`") {
			t.Errorf("POST /draft reads the field %q; the field table of docs/protocol.md does not name it", f)
		}
	}

	for _, c := range definedCodes(t) {
		if _, ok := status[c]; !ok && c != "client_closed" { // client_closed: nobody is there to read it
			t.Errorf("error code %q is not in the errors table of docs/protocol.md", c)
		}
	}

	// A model with the Qwen vocabulary (so the page's ids are valid) and the
	// tiny shapes, served for real.
	spec := testmodel.Tiny(model.ArchQwen3, dtype.Q8_0)
	spec.Vocab, spec.MaxContext = 151936, 32768
	path := filepath.Join(t.TempDir(), "qwen-vocab.gguf")
	if err := spec.WriteGGUF(path); err != nil {
		t.Fatal(err)
	}
	proc := startProc(t, "serve", "--model", path, "--addr", "127.0.0.1:0", "--log-format", "json",
		"--threads", "2", "--kv-cache-bytes", "67108864")
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(proc.waitLine(`"msg":"listening"`, 30*time.Second)), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("listening line: %v", err)
	}
	proc.waitLine(`"msg":"healthy"`, 60*time.Second)
	do := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+rec.Addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body = nil
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}

	examples := curlExamples(t, p)
	if len(examples) < 8 {
		t.Fatalf("found %d curl examples in docs/protocol.md", len(examples))
	}
	for _, ex := range examples {
		st, got := do(ex.method, ex.path, ex.body)
		where := fmt.Sprintf("docs/protocol.md:%d (%s %s %s)", ex.line, ex.method, ex.path, ex.body)
		var want struct {
			Error  *struct{ Code string }
			Draft  *[]int
			Status *string
		}
		if err := json.Unmarshal([]byte(ex.want), &want); err != nil {
			t.Errorf("%s: the shown answer is not JSON: %v", where, err)
			continue
		}
		switch {
		case want.Error != nil:
			if code := errCode(got); code != want.Error.Code || st != status[code] {
				t.Errorf("%s: have %d %s; the page shows %s, which its errors table gives status %d", where, st, got, want.Error.Code, status[want.Error.Code])
			}
		case st != http.StatusOK:
			t.Errorf("%s: have %d %s; the page shows a success", where, st, got)
		case want.Draft != nil:
			var d struct{ Draft *[]int }
			var n struct{ N *int }
			json.Unmarshal([]byte(ex.body), &n)
			if json.Unmarshal(got, &d) != nil || d.Draft == nil || (n.N != nil && len(*d.Draft) != *n.N) {
				t.Errorf("%s: have %s; want a draft of the asked length", where, got)
			}
		case want.Status != nil:
			if !strings.Contains(string(got), `"status":"`+*want.Status+`"`) {
				t.Errorf("%s: have %s; the page shows %s", where, got, ex.want)
			}
		default: // any other object (/v1/info): the same fields
			if have, show := keysOf(t, where, got), keysOf(t, where, []byte(ex.want)); !slices.Equal(have, show) {
				t.Errorf("%s: the answer has the fields %v; the page shows %v", where, have, show)
			}
		}
	}

	// draftd eval's client speaks the page's protocol to the same server: a
	// draft of the asked length, and an error body read into its code.
	ec := &eval.DraftdClient{HTTP: http.DefaultClient, URL: "http://" + rec.Addr}
	if d, err := ec.Draft(context.Background(), []int{151644, 872, 198}, 8); err != nil || len(d) != 8 {
		t.Errorf("eval's client: draft %v, %v; want 8 tokens", d, err)
	}
	var se *eval.StatusError
	if _, err := ec.Draft(context.Background(), []int{151936}, 4); !errors.As(err, &se) || se.Status != status["token_out_of_range"] || se.Code != "token_out_of_range" {
		t.Errorf("eval's client on an id out of range: %v; want the documented %d token_out_of_range", err, status["token_out_of_range"])
	}

	// GET /v1/info: the field table names exactly the answer's fields.
	_, info := do("GET", "/v1/info", "")
	var table []string
	for _, row := range tableRows(p, "`GET /v1/info`") {
		table = append(table, codesIn(row[0])...)
	}
	sort.Strings(table)
	if have := keysOf(t, "/v1/info", info); !slices.Equal(have, table) {
		t.Errorf("GET /v1/info has the fields %v; the table in docs/protocol.md lists %v", have, table)
	}

	// GET /metrics: the table names exactly the draftd_ metrics served.
	_, metrics := do("GET", "/metrics", "")
	var served []string
	sc := bufio.NewScanner(strings.NewReader(string(metrics)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "draftd_") {
			served = append(served, f[2])
		}
	}
	sort.Strings(served)
	var listed []string
	for _, row := range tableRows(p, "`GET /metrics`") {
		listed = append(listed, codesIn(row[0])...)
	}
	sort.Strings(listed)
	if !slices.Equal(served, listed) {
		t.Errorf("GET /metrics serves %v; the table in docs/protocol.md lists %v", served, listed)
	}
}

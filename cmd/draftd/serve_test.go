// End-to-end tests of `draftd serve` as an operator and a hostile client
// meet it (issue "Hostile clients and clumsy operators"): the built binary
// on a free loopback port with the shipped tiny model, raw TCP clients,
// real signals, and crafted model paths. Also the CLI convention of every
// command.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/model"
)

const tinyGGUF = "../../testdata/models/tiny-qwen3-q8_0.gguf"

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// draftdBin builds the command once per test run.
func draftdBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "draftd-bin")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "draftd")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is a running draftd process whose stderr is collected line by line.
type proc struct {
	t     testing.TB
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	grew  chan struct{} // closed and replaced on each new line
	done  chan struct{} // closed when the process has exited
	err   error         // its Wait result
}

func startProc(t testing.TB, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, args...)
}

// startProcEnv is startProc with env added to the test's environment.
func startProcEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(draftdBin(t), args...), grew: make(chan struct{}), done: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
		}
		io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine waits for a stderr line containing s and returns it.
func (p *proc) waitLine(s string, within time.Duration) string {
	p.t.Helper()
	deadline := time.After(within)
	seen := 0
	for {
		p.mu.Lock()
		lines, grew := p.lines, p.grew
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if strings.Contains(lines[seen], s) {
				return lines[seen]
			}
		}
		select {
		case <-grew:
		case <-p.done:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if n == seen {
				p.t.Fatalf("draftd exited (%v) without logging %q; stderr:\n%s", p.err, s, p.stderr())
			}
		case <-deadline:
			p.t.Fatalf("no %q on stderr within %v; stderr:\n%s", s, within, p.stderr())
		}
	}
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// wait waits for the exit and returns the exit code (−1: killed by a
// signal); it fails the test if that takes longer than within.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("draftd did not exit within %v; stderr:\n%s", within, p.stderr())
	}
	return p.cmd.ProcessState.ExitCode()
}

// serving is a `draftd serve` on 127.0.0.1:0.
type serving struct {
	*proc
	addr string
}

// startServe starts draftd serve with the tiny model and extra flags, and
// waits until it listens (healthy too, unless the flags say otherwise).
func startServe(t testing.TB, healthy bool, extra ...string) *serving {
	t.Helper()
	args := append([]string{"serve", "--model", tinyGGUF, "--addr", "127.0.0.1:0", "--log-format", "json",
		"--threads", "2", "--kv-cache-bytes", "67108864"}, extra...)
	p := startProc(t, args...)
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(p.waitLine(`"msg":"listening"`, 30*time.Second)), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("listening line: %v", err)
	}
	s := &serving{proc: p, addr: rec.Addr}
	if healthy {
		p.waitLine(`"msg":"healthy"`, 30*time.Second)
	}
	return s
}

// post sends one POST /draft with a fresh connection.
func (s *serving) post(body string) (int, http.Header, []byte) {
	s.t.Helper()
	c := s.dial()
	defer c.Close()
	fmt.Fprintf(c, "POST /draft HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return readAnswer(s.t, c)
}

func (s *serving) dial() *net.TCPConn {
	s.t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	return c.(*net.TCPConn)
}

func readAnswer(t testing.TB, c net.Conn) (int, http.Header, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer body: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// errCode returns the code of a JSON error body.
func errCode(b []byte) string {
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(b, &e)
	return e.Error.Code
}

func draftOf(t testing.TB, b []byte) []int {
	t.Helper()
	var d struct{ Draft *[]int }
	if err := json.Unmarshal(b, &d); err != nil || d.Draft == nil {
		t.Fatalf("not a draft: %q", b)
	}
	return *d.Draft
}

func ctxIDs(start, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = (start + 7*i) % 512
	}
	return s
}

func idsJSON(ids []int) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// stalledUpload opens a POST /draft that announces a body of length bytes,
// waits until the server reads it (its 100 Continue), sends a few bytes and
// stalls.
func (s *serving) stalledUpload(length int) *net.TCPConn {
	s.t.Helper()
	c := s.dial()
	s.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /draft HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", length)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		s.t.Fatalf("stalled upload: have %q (%v); want 100 Continue", line, err)
	}
	c.SetReadDeadline(time.Time{})
	io.WriteString(c, `{"tokens":[1,`)
	return c
}

// Item 1: connections that dribble their bodies hold no drafting capacity.
func TestServeSlowUploadsDoNotStarve(t *testing.T) {
	s := startServe(t, true, "--max-batch", "1", "--max-queue", "1")
	for range 8 {
		s.stalledUpload(1000)
	}
	for i := range 3 {
		st, _, b := s.post(`{"tokens":` + idsJSON(ctxIDs(i, 30)) + `,"n":8}`)
		if st != http.StatusOK || len(draftOf(t, b)) != 8 {
			t.Fatalf("draft %d with 8 stalled uploads: status %d %s; want 200 and 8 tokens", i, st, b)
		}
	}
}

// Item 1: a stalled body ends with 408 body_timeout after --body-timeout.
func TestServeBodyTimeout(t *testing.T) {
	s := startServe(t, true, "--body-timeout", "1s")
	c := s.stalledUpload(1000)
	st, _, b := readAnswer(t, c)
	if st != http.StatusRequestTimeout || errCode(b) != "body_timeout" {
		t.Errorf("stalled upload: have %d %s; want 408 body_timeout", st, b)
	}
}

// Item 2: a client that half-closes after a complete request is a client
// that closed: it gets its whole draft (when the draft was done before the
// server saw the end of stream) or no answer (its work was cancelled), never
// an empty or partial 200.
func TestServeHalfClose(t *testing.T) {
	s := startServe(t, true)
	m, err := model.Load(tinyGGUF, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := range 10 {
		ctx := ctxIDs(i, 40)
		want, err := m.Generate(ctx, 64)
		if err != nil {
			t.Fatal(err)
		}
		c := s.dial()
		body := `{"tokens":` + idsJSON(ctx) + `,"n":64}`
		fmt.Fprintf(c, "POST /draft HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		raw, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("half-closed request %d: %v", i, err)
		}
		if len(raw) == 0 {
			continue // cancelled: the connection closed with no answer
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("half-closed request %d: %q is not an answer: %v", i, raw, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("half-closed request %d: status %d, body %q (%v); want a 200 with a draft, or no answer", i, resp.StatusCode, b, err)
		}
		if have := draftOf(t, b); !slices.Equal(have, want) {
			t.Fatalf("half-closed request %d: have %v; want %v", i, have, want)
		}
	}
}

// Item 4: a model path that is not a regular file fails at once, naming it.
func TestServeModelNotRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	hf := filepath.Join(dir, "hf")
	os.Mkdir(hf, 0o755)
	if err := syscall.Mkfifo(filepath.Join(hf, "config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{{"gguf fifo", fifo}, {"hf config fifo", hf}, {"device", "/dev/zero"}} {
		t.Run(c.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"info", "--model", c.path},
				{"serve", "--model", c.path, "--addr", "127.0.0.1:0"},
			} {
				p := startProc(t, args...)
				if code := p.wait(20 * time.Second); code != 1 {
					t.Errorf("%s: exit code %d; want 1", args[0], code)
				}
				if e := p.stderr(); !strings.Contains(e, "not a regular file") {
					t.Errorf("%s: stderr does not say the file is not a regular file:\n%s", args[0], e)
				}
			}
		})
	}
}

// Item 5: every serve flag out of its range is a usage error (exit 2, the
// flag named, the synopsis), not a panic or a crippled server.
func TestServeFlagRanges(t *testing.T) {
	for _, c := range []struct{ flag, value string }{
		{"max-queue", "9223372036854775807"}, {"max-queue", "0"}, {"max-queue", "65537"},
		{"max-batch", "9223372036854775807"}, {"max-batch", "0"}, {"max-batch", "1025"},
		{"threads", "100000"}, {"threads", "-1"},
		{"draft-len", "0"}, {"draft-len", "65"}, {"max-draft-len", "0"}, {"max-draft-len", "100000"},
		{"kv-cache-bytes", "-1"}, {"kv-cache-bytes", "1000"}, {"kv-cache-bytes", "9223372036854775807"},
		{"max-body-bytes", "10"}, {"max-body-bytes", "9223372036854775807"},
		{"max-inflight-body-bytes", "100"}, {"max-inflight-body-bytes", "9223372036854775807"},
		{"body-timeout", "0s"}, {"body-timeout", "-1s"}, {"body-timeout", "1000h"},
		{"queue-timeout", "0s"}, {"queue-timeout", "1000h"},
		{"shutdown-timeout", "0s"}, {"shutdown-timeout", "-5s"},
		{"predraft-branches", "-1"}, {"predraft-branches", "65"},
		{"predraft-delay", "-1ms"}, {"predraft-delay", "2h"},
		{"kv-cache-bytes", "33554432"}, // all of it set aside for the default --max-session-tokens
		{"max-session-tokens", "100"},  // under the model's maximum context: checked once it is loaded
		{"kv-type", "q4_0"}, {"draft-vocab", "-1"}, {"draft-vocab", "1000"}, {"draft-vocab-file", "vocab.json"},
	} {
		p := startProc(t, "serve", "--model", tinyGGUF, "--addr", "127.0.0.1:0", "--"+c.flag, c.value)
		code := p.wait(20 * time.Second)
		e := p.stderr()
		if code != 2 || !strings.Contains(e, "--"+c.flag+" ") || !strings.Contains(e, "usage: draftd serve") || strings.Contains(e, "panic") {
			t.Errorf("--%s %s: exit %d; want 2 with the flag named and the synopsis; stderr:\n%.600s", c.flag, c.value, code, e)
		}
	}
}

// Item 6: an error echoes at most a short quote of the input, in the answer
// and in the log.
func TestServeTruncatesEchoedInput(t *testing.T) {
	s := startServe(t, true)
	huge := strings.Repeat("9", 1<<20)
	for _, body := range []string{
		`{"tokens":[1,` + huge + `]}`,
		`{"tokens":[1,` + huge + `.5]}`,
		`{"tokens":[1],"n":` + huge + `}`,
	} {
		st, _, b := s.post(body)
		if st != http.StatusBadRequest {
			t.Errorf("status %d; want 400", st)
		}
		if len(b) > 512 {
			t.Errorf("error answer of %d bytes echoes the input: %.200s…", len(b), b)
		}
	}
	st, _, b := s.post(`{"tokens":[1]}`) // a request after them, to flush the log
	if st != http.StatusOK {
		t.Fatalf("status %d %s", st, b)
	}
	// Every warn line was logged before its answer was written.
	for _, l := range strings.Split(s.stderr(), "\n") {
		if len(l) > 2048 {
			t.Errorf("log line of %d bytes: %.200s…", len(l), l)
		}
	}
}

// Item 7: the bytes of bodies in flight are bounded; over the bound a
// request gets 503 busy with Retry-After at once.
func TestServeBodyBudget(t *testing.T) {
	s := startServe(t, true, "--max-body-bytes", "1048576", "--max-inflight-body-bytes", "1048576")
	s.stalledUpload(1000000) // holds ~1 MB of the budget
	st, h, b := s.post(`{"tokens":` + idsJSON(ctxIDs(1, 20000)) + `}`)
	if st != http.StatusServiceUnavailable || errCode(b) != "busy" || h.Get("Retry-After") == "" {
		t.Errorf("over the in-flight body budget: have %d %v %s; want 503 busy with Retry-After", st, h, b)
	}
	st, _, b = s.post(`{"tokens":[1,2,3]}`) // small enough to fit beside it
	if st != http.StatusOK {
		t.Errorf("a small body beside the stalled one: %d %s; want 200", st, b)
	}
}

// Item 8: a request that waits longer than --queue-timeout for a batch
// slot gets 503 queue_timeout with Retry-After; any other its whole draft.
func TestServeQueueTimeout(t *testing.T) {
	s := startServe(t, true, "--max-batch", "1", "--queue-timeout", "1ms")
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for i := range 16 {
		wg.Go(func() {
			st, h, b := s.post(`{"tokens":` + idsJSON(ctxIDs(i, 150)) + `,"n":64}`)
			key := strconv.Itoa(st)
			switch {
			case st == http.StatusOK && len(draftOf(t, b)) == 64:
			case st == http.StatusServiceUnavailable && errCode(b) == "queue_timeout" && h.Get("Retry-After") != "":
				key += " queue_timeout"
			default:
				t.Errorf("status %d %s; want 200 or 503 queue_timeout with Retry-After", st, b)
			}
			mu.Lock()
			counts[key]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("answers: %v", counts)
	if counts["503 queue_timeout"] == 0 {
		t.Errorf("answers %v; want queue timeouts with 16 requests of 64 tokens on one batch slot", counts)
	}
}

// Item 8: SIGHUP shuts down gracefully; a second signal during a shutdown
// that waits for a request exits at once.
func TestServeSignals(t *testing.T) {
	t.Run("SIGHUP is a graceful stop", func(t *testing.T) {
		s := startServe(t, true)
		s.cmd.Process.Signal(syscall.SIGHUP)
		if code := s.wait(30 * time.Second); code != 0 {
			t.Errorf("exit code %d after SIGHUP; want 0 (graceful)", code)
		}
		if e := s.stderr(); !strings.Contains(e, `"msg":"stopped"`) {
			t.Errorf("no graceful stop in the log:\n%s", e)
		}
	})
	t.Run("second SIGTERM forces exit", func(t *testing.T) {
		s := startServe(t, true, "--shutdown-timeout", "10m")
		s.stalledUpload(1000) // shutdown waits for it
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.waitLine(`"msg":"shutting down"`, 30*time.Second)
		s.cmd.Process.Signal(syscall.SIGTERM)
		if code := s.wait(20 * time.Second); code != 1 {
			t.Errorf("exit code %d after a second SIGTERM; want 1", code)
		}
		if e := s.stderr(); !strings.Contains(e, "second signal") {
			t.Errorf("no word of the second signal:\n%s", e)
		}
	})
}

// The CLI convention: every command answers a bad flag with exit 2 and its
// synopsis on stderr, and -h with exit 0.
func TestCommandsUsageConvention(t *testing.T) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		var stderr bytes.Buffer
		cmd := exec.Command(draftdBin(t), name, "--no-such-flag")
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(stderr.String(), "usage: draftd "+name) {
			t.Errorf("draftd %s --no-such-flag: exit %d (%v); want 2 with \"usage: draftd %s\"; stderr:\n%.400s", name, code, err, name, stderr.String())
		}
		stderr.Reset()
		cmd = exec.Command(draftdBin(t), name, "-h")
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || !strings.Contains(stderr.String(), "usage: draftd "+name) {
			t.Errorf("draftd %s -h: %v; want exit 0 with the synopsis; stderr:\n%.400s", name, err, stderr.String())
		}
	}
}

// Item 7: memory per in-flight request is about its body. 200 concurrent
// 2 MiB bodies (a 2 MiB id array, and a short context padded by a 2 MiB
// unknown field) are sent at once to a server whose in-flight body budget
// admits them all; the server's peak RSS (VmHWM) over its RSS before is
// divided by the number of bodies. DRAFTD_LONG=1 (it moves 800 MiB);
// DRAFTD_MEM_BODIES sets the count, and DRAFTD_MEM_OLD=1 leaves out
// --max-inflight-body-bytes, to measure a build from before it existed.
func TestServeMemoryPerRequest(t *testing.T) {
	if os.Getenv("DRAFTD_LONG") == "" {
		t.Skip("DRAFTD_LONG=1: 200 concurrent 2 MiB bodies")
	}
	const size = 2 << 20
	bodies := 200
	if v, err := strconv.Atoi(os.Getenv("DRAFTD_MEM_BODIES")); err == nil && v > 0 {
		bodies = v
	}
	ids := `{"tokens":[` + strings.Repeat("511,", size/4-8) + `1]}`
	pad := `{"tokens":[1,2,3],"n":4,"pad":"` + strings.Repeat("x", size-64) + `"}`
	for _, c := range []struct {
		name, body string
		status     int
	}{{"ids", ids, http.StatusBadRequest}, {"padded", pad, http.StatusOK}} {
		t.Run(c.name, func(t *testing.T) {
			extra := []string{"--max-body-bytes", strconv.Itoa(size)}
			if os.Getenv("DRAFTD_MEM_OLD") == "" {
				extra = append(extra, "--max-inflight-body-bytes", strconv.Itoa(2*bodies*size))
			}
			s := startServe(t, true, extra...)
			rss := func(key string) int64 {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, key+":"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
						return kb << 10
					}
				}
				t.Fatalf("no %s", key)
				return 0
			}
			before := rss("VmRSS")
			// Every client sends its headers and all but the last byte, waits
			// for the others, then sends the last byte: all bodies are in the
			// server at once.
			var ready, wg sync.WaitGroup
			ready.Add(bodies)
			gate := make(chan struct{})
			statuses := make(chan int, bodies)
			body := c.body
			for range bodies {
				wg.Go(func() {
					c := s.dial()
					defer c.Close()
					fmt.Fprintf(c, "POST /draft HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
					io.WriteString(c, body[:len(body)-1])
					ready.Done()
					<-gate
					io.WriteString(c, body[len(body)-1:])
					st, _, _ := readAnswer(t, c)
					statuses <- st
				})
			}
			ready.Wait()
			close(gate)
			wg.Wait()
			close(statuses)
			n := 0
			for st := range statuses {
				if st == c.status {
					n++
				}
			}
			peak := rss("VmHWM")
			per := float64(peak-before) / float64(bodies)
			t.Logf("%s: %d of %d answered %d; RSS %.0f MiB before, peak %.0f MiB: %.2f MiB per request (%.2f× its body)",
				c.name, n, bodies, c.status, float64(before)/(1<<20), float64(peak)/(1<<20), per/(1<<20), per/size)
			if n != bodies {
				t.Errorf("%d of %d answers were %d", n, bodies, c.status)
			}
			if per > 3*size {
				t.Errorf("%.2f MiB per in-flight request of %d MiB; want at most 3× its body", per/(1<<20), size>>20)
			}
		})
	}
}

// The scale-out test of deploy/haproxy/haproxy.cfg (issue 13): three
// `draftd serve` processes and the real HAProxy on loopback, the shipped
// configuration with only its server lines replaced. It runs when
// DRAFTD_SCALEOUT=1 (scripts/test sets it when haproxy is installed); it is
// not a unit test of the proxy configuration's text.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/eval"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testmodel"
)

// TestScaleOut replays multi-conversation datasets at concurrency 32:
//
//  1. against one replica alone: the prefix-cache hit tokens it reports are
//     the reference;
//  2. through HAProxy to three fresh replicas: 0 failures, every
//     conversation served by one replica only, and the replicas' hit tokens
//     summed ≥ 90 % of the reference;
//  3. through HAProxy again with a new dataset, killing (SIGKILL) the
//     busiest replica a third of the way in: 0 failures, its conversations
//     go on at the other two, and no conversation of the other two moves
//     (consistent hashing).
func TestScaleOut(t *testing.T) {
	if os.Getenv("DRAFTD_SCALEOUT") != "1" {
		t.Skip("set DRAFTD_SCALEOUT=1 (needs haproxy: apt-get install haproxy)")
	}
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("DRAFTD_SCALEOUT=1 but no haproxy in PATH: apt-get install haproxy")
	}
	dir := t.TempDir()
	bin := draftdBin(t)

	// A tiny target and a drafter of its first layers, as in `draftd demo`,
	// so conversations take several steps each.
	spec := testmodel.Tiny(model.ArchQwen3, dtype.Q8_0)
	spec.Decay = 0.6
	tspec, dspec := spec, spec
	tspec.Layers, dspec.Layers = 8, 4
	targetPath, draftPath := filepath.Join(dir, "target.gguf"), filepath.Join(dir, "drafter.gguf")
	if err := tspec.WriteGGUF(targetPath); err != nil {
		t.Fatal(err)
	}
	if err := dspec.WriteGGUF(draftPath); err != nil {
		t.Fatal(err)
	}
	data1 := scaleOutData(t, targetPath, 1)
	data2 := scaleOutData(t, targetPath, 2)

	// 1. One replica alone.
	one := startReplica(t, bin, draftPath)
	r := replayVia(t, one.url, data1, nil)
	if r.Failures != 0 {
		t.Fatalf("one replica: %d failures (first: %s)", r.Failures, r.FirstError)
	}
	ref := one.metric(t, "draftd_prefix_cache_hit_tokens_total")
	one.stop(t)
	t.Logf("one replica: %d requests, τ %.2f, prefix-cache hit tokens %.0f", r.Requests, r.Tau, ref)
	if ref <= 0 {
		t.Fatal("one replica reports no prefix-cache hits: the reference is meaningless")
	}

	// 2. Three replicas behind the proxy.
	reps := []*replica{startReplica(t, bin, draftPath), startReplica(t, bin, draftPath), startReplica(t, bin, draftPath)}
	proxy := startProxy(t, haproxy, dir, reps)
	rec := newRecorder(proxy)
	r = replayVia(t, proxy, data1, rec)
	if r.Failures != 0 {
		t.Fatalf("through the proxy: %d failures (first: %s)", r.Failures, r.FirstError)
	}
	var sum float64
	for _, rp := range reps {
		sum += rp.metric(t, "draftd_prefix_cache_hit_tokens_total")
	}
	byReplica := rec.conversationsByReplica()
	t.Logf("three replicas: %d requests, conversations per replica %v, prefix-cache hit tokens %.0f (%.1f%% of one replica's)",
		r.Requests, countEach(byReplica), sum, 100*sum/ref)
	if sum < 0.9*ref {
		t.Errorf("prefix-cache hit tokens over 3 replicas: have %.0f; want ≥ 90%% of one replica's %.0f", sum, ref)
	}
	for conv, served := range rec.replicas() {
		if len(served) != 1 {
			t.Errorf("conversation %s was served by %v; want one replica", conv, served)
		}
	}
	if len(byReplica) < 2 {
		t.Errorf("conversations per replica %v: the hash sent everything to one replica", countEach(byReplica))
	}

	// The client-supplied key wins over the tokens.
	hc := &http.Client{Timeout: 30 * time.Second}
	var sessionReplicas []string
	for i := range 6 {
		body := fmt.Sprintf(`{"tokens":[%d,%d,%d],"n":2}`, 100+i, 7*i, 3)
		req, _ := http.NewRequest("POST", proxy+"/draft", strings.NewReader(body))
		req.Header.Set("X-Draftd-Session", "conversation-42")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("X-Draftd-Session request: HTTP %d", resp.StatusCode)
		}
		sessionReplicas = append(sessionReplicas, resp.Header.Get("X-Draftd-Replica"))
	}
	for _, s := range sessionReplicas[1:] {
		if s != sessionReplicas[0] {
			t.Errorf("one X-Draftd-Session, different tokens: served by %v; want one replica", sessionReplicas)
			break
		}
	}

	// Sessions (docs/protocol.md, batched and incremental drafting) are keyed by their body "session", the same key
	// as the header: the accepted/bonus requests carry no tokens to hash,
	// and reach the replica that holds the session (anything else is a 409).
	sessionsAt := map[string]bool{}
	for i := range 8 {
		id := fmt.Sprintf("sess-%d", i)
		body := fmt.Sprintf(`{"session":%q,"tokens":[%d,%d,%d,%d],"n":4}`, id, 11+i, 5*i, 7, 9)
		var at []string
		for step := range 5 {
			if step == 4 { // the last through /v1/drafts, header and body agreeing
				body = `{"requests":[` + body + `]}`
			}
			path := map[bool]string{false: "/draft", true: "/v1/drafts"}[step == 4]
			req, _ := http.NewRequest("POST", proxy+path, strings.NewReader(body))
			if step == 4 {
				req.Header.Set("X-Draftd-Session", id)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || bytes.Contains(b, []byte("error")) {
				t.Fatalf("session %s step %d: HTTP %d %s", id, step, resp.StatusCode, b)
			}
			at = append(at, resp.Header.Get("X-Draftd-Replica"))
			body = fmt.Sprintf(`{"session":%q,"accepted":1,"bonus":%d,"n":4}`, id, 3+step)
		}
		for _, s := range at[1:] {
			if s != at[0] {
				t.Errorf("session %s served by %v; want one replica", id, at)
				break
			}
		}
		sessionsAt[at[0]] = true
	}
	if len(sessionsAt) < 2 {
		t.Errorf("8 sessions all on %v: the session key is not hashed", sessionsAt)
	}

	// 3. Kill the busiest replica a third of the way into a new replay.
	rec = newRecorder(proxy)
	var total int
	for _, s := range data2 {
		total += len(s.Continuation)
	}
	var done atomic.Int64
	var once sync.Once
	var victim string
	kill := func() {
		// The replica that holds the most conversations so far.
		most := 0
		for name, convs := range rec.conversationsByReplica() {
			if len(convs) > most {
				victim, most = name, len(convs)
			}
		}
		for _, rp := range reps {
			if rp.name == victim {
				rec.markKill()
				rp.kill(t)
			}
		}
	}
	rec.progress = func(k int) {
		if done.Add(int64(k)) >= int64(total/3) {
			once.Do(kill)
		}
	}
	r = replayVia(t, proxy, data2, rec)
	if victim == "" {
		t.Fatal("the replay ended before a replica was killed")
	}
	if r.Failures != 0 {
		t.Errorf("with %s killed mid-replay: %d failures (kinds %v, first: %s); want 0", victim, r.Failures, r.FailureKinds, r.FirstError)
	}
	moved, kept := 0, 0
	for conv, h := range rec.history() {
		before, after := h.before, h.after
		switch {
		case len(before) == 0 || len(after) == 0:
			// started after the kill, or finished before it
		case before[0] == victim:
			for _, s := range after {
				if s == victim {
					t.Errorf("conversation %s: served by the killed %s after the kill", conv, victim)
				}
			}
			moved++
		default:
			for _, s := range append(before, after...) {
				if s != before[0] {
					t.Errorf("conversation %s moved from %s to %s although %s stayed up", conv, before[0], s, before[0])
					break
				}
			}
			kept++
		}
	}
	t.Logf("killed %s: %d requests, 0 failures expected, have %d; %d of its conversations went on elsewhere, %d others stayed put",
		victim, r.Requests, r.Failures, moved, kept)
	if moved == 0 {
		t.Errorf("no conversation of the killed %s went on after the kill: the test did not exercise failover", victim)
	}
}

// scaleOutData is 48 conversations of 20–40-token random prompts (so at
// least the 16 ids the proxy hashes) and the target's 96-token greedy
// continuation; seed makes a different set.
func scaleOutData(t *testing.T, targetPath string, seed uint64) []eval.Sample {
	t.Helper()
	m, err := model.Load(targetPath, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rng := rand.New(rand.NewPCG(seed, 13))
	samples := make([]eval.Sample, 48)
	for i := range samples {
		prompt := make([]int, 20+rng.IntN(21))
		for j := range prompt {
			prompt[j] = rng.IntN(m.Vocab)
		}
		cont, err := m.Generate(prompt, 96)
		if err != nil {
			t.Fatal(err)
		}
		samples[i] = eval.Sample{ID: fmt.Sprintf("c%d-%02d", seed, i), Prompt: prompt, Continuation: cont}
	}
	return samples
}

// replayVia replays samples at concurrency 32 against base, through rec when
// it is not nil.
func replayVia(t *testing.T, base string, samples []eval.Sample, rec *recorder) *eval.Report {
	t.Helper()
	var d eval.Drafter
	opt := eval.ReplayOptions{N: 8, Concurrency: 32, Timeout: 30 * time.Second}
	if rec != nil {
		d, opt.Progress = rec, func(k int) {
			if rec.progress != nil {
				rec.progress(k)
			}
		}
	} else {
		d, _ = eval.NewDrafter(eval.BackendDraftd, eval.NewHTTPClient(32), base)
	}
	r, err := eval.Replay(t.Context(), d, samples, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// child is a started process whose exit is waited for once, in the
// background; done is closed when it has exited.
type child struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
	err  error // valid after done
}

func startChild(t *testing.T, env []string, name string, args ...string) *child {
	t.Helper()
	p := &child{cmd: exec.Command(name, args...), log: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// replica is one `draftd serve` process.
type replica struct {
	*child
	name string // HAProxy's server name for it
	url  string
}

var replicaCount atomic.Int32

func startReplica(t *testing.T, bin, modelPath string) *replica {
	t.Helper()
	addr := freeAddr(t)
	rp := &replica{name: fmt.Sprintf("r%d", replicaCount.Add(1)), url: "http://" + addr}
	rp.child = startChild(t, nil, bin, "serve", "--model", modelPath, "--addr", addr, "--threads", "1",
		"--kv-cache-bytes", strconv.Itoa(64<<20), "--log-level", "warn")
	waitFor(t, rp.url+"/health", rp.child)
	return rp
}

// stop sends SIGTERM and waits for a clean exit.
func (rp *replica) stop(t *testing.T) {
	t.Helper()
	rp.cmd.Process.Signal(syscall.SIGTERM)
	<-rp.done
	if rp.err != nil {
		t.Errorf("replica %s: %v\n%s", rp.name, rp.err, rp.log)
	}
}

// kill ends the process with SIGKILL: no drain, connections reset.
func (rp *replica) kill(t *testing.T) {
	rp.cmd.Process.Kill()
	<-rp.done
}

// metric reads one unlabelled counter from the replica's /metrics.
func (rp *replica) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(rp.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("replica %s: no %s in /metrics", rp.name, name)
	return 0
}

// startProxy runs haproxy with deploy/haproxy/haproxy.cfg, its server lines
// replaced by the replicas, and returns its URL once it answers.
func startProxy(t *testing.T, haproxy, dir string, reps []*replica) string {
	t.Helper()
	cfg, err := os.ReadFile("../../deploy/haproxy/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	s := string(cfg)
	begin, end := strings.Index(s, "    # BEGIN servers"), strings.Index(s, "    # END servers")
	if begin < 0 || end < begin {
		t.Fatal("deploy/haproxy/haproxy.cfg: no BEGIN servers … END servers block")
	}
	var servers strings.Builder
	for _, rp := range reps {
		fmt.Fprintf(&servers, "    server %s %s check\n", rp.name, strings.TrimPrefix(rp.url, "http://"))
	}
	s = s[:begin] + servers.String() + s[end:]
	// The loopback test resolves nothing; the resolvers section reads
	// /etc/resolv.conf, which is harmless, so it stays as shipped.
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, maddr := freeAddr(t), freeAddr(t)
	p := startChild(t, []string{"DRAFTD_PROXY_BIND=" + addr, "DRAFTD_PROXY_METRICS_BIND=" + maddr}, haproxy, "-db", "-f", path)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("haproxy log:\n%s", p.log)
		}
	})
	waitFor(t, "http://"+maddr+"/metrics", p)
	return "http://" + addr
}

// waitFor polls u until it answers 200; it fails when the process exits
// first or a minute passes.
func waitFor(t *testing.T, u string, p *child) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s: the process exited before it answered: %v\n%s", u, p.err, p.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s: no 200 within a minute", u)
}

// recorder is an eval.Drafter that posts /draft to the proxy and records,
// per conversation (its first 16 ids), which replica answered
// (X-Draftd-Replica) before and after markKill.
type recorder struct {
	url      string
	hc       *http.Client
	progress func(tokens int)
	killed   atomic.Bool

	mu  sync.Mutex
	log map[string]*served
}

type served struct{ before, after []string }

func newRecorder(url string) *recorder {
	return &recorder{url: url, hc: eval.NewHTTPClient(32), log: map[string]*served{}}
}

func (rc *recorder) markKill() { rc.killed.Store(true) }

// Draft implements eval.Drafter.
func (rc *recorder) Draft(ctx context.Context, tokens []int, n int) ([]int, error) {
	startedAfter := rc.killed.Load()
	body, _ := json.Marshal(map[string]any{"tokens": tokens, "n": n})
	req, err := http.NewRequestWithContext(ctx, "POST", rc.url+"/draft", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := rc.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var out struct{ Draft []int }
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	name := resp.Header.Get("X-Draftd-Replica")
	if name == "" {
		return nil, errors.New("answer without X-Draftd-Replica")
	}
	conv := fmt.Sprint(tokens[:min(16, len(tokens))])
	rc.mu.Lock()
	h := rc.log[conv]
	if h == nil {
		h = &served{}
		rc.log[conv] = h
	}
	if startedAfter {
		h.after = append(h.after, name)
	} else {
		h.before = append(h.before, name)
	}
	rc.mu.Unlock()
	return out.Draft, nil
}

func (rc *recorder) history() map[string]served {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := make(map[string]served, len(rc.log))
	for k, v := range rc.log {
		m[k] = served{append([]string(nil), v.before...), append([]string(nil), v.after...)}
	}
	return m
}

// replicas is the set of replicas that served each conversation.
func (rc *recorder) replicas() map[string][]string {
	out := map[string][]string{}
	for conv, h := range rc.history() {
		seen := map[string]bool{}
		for _, s := range append(h.before, h.after...) {
			if !seen[s] {
				seen[s] = true
				out[conv] = append(out[conv], s)
			}
		}
	}
	return out
}

// conversationsByReplica maps each replica to the conversations it served
// first.
func (rc *recorder) conversationsByReplica() map[string][]string {
	out := map[string][]string{}
	for conv, h := range rc.history() {
		if all := append(h.before, h.after...); len(all) > 0 {
			out[all[0]] = append(out[all[0]], conv)
		}
	}
	return out
}

func countEach(m map[string][]string) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = len(v)
	}
	return c
}

// Test of issue 37, failure 1: the peak RSS of `draftd serve` follows from
// its flags. A real serve process fills its KV cache, then answers one
// 4 MiB /draft body after another; its peak RSS (VmHWM) must stay within
// docs/operations.md's bound: the RSS once healthy + --kv-cache-bytes +
// --max-inflight-body-bytes + the overhead (64 MiB + (16 B × --max-queue +
// 32 B × --max-batch) × (max context + --max-draft-len)).

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procStatus reads one "Key: N kB" field of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", key, l)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// metricValue reads one unlabelled sample of GET /metrics.
func (s *serving) metricValue(name string) float64 {
	s.t.Helper()
	resp, err := http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, l := range strings.Split(sb.String(), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				s.t.Fatalf("%s: %q", name, l)
			}
			return f
		}
	}
	s.t.Fatalf("no %s in /metrics", name)
	return 0
}

// TestServeMemoryBound: the KV cache filled (--kv-cache-bytes 256 MiB by
// default, DRAFTD_MEM_KV=BYTES for a bigger run; DRAFTD_MEM_MODEL=FILE to
// serve another model than the tiny Qwen3), then 96 bodies of 4 MiB one
// after another, each answered 200: the peak RSS stays within the
// documented bound. Before the memory limit it was about twice the live
// heap (the collector's headroom over a heap the KV blocks fill).
func TestServeMemoryBound(t *testing.T) {
	kv := int64(256 << 20)
	if v, err := strconv.ParseInt(os.Getenv("DRAFTD_MEM_KV"), 10, 64); err == nil && v > 0 {
		kv = v
	}
	const (
		body     = 4 << 20
		inflight = 8 << 20
		bodies   = 96
		maxQueue = 256
		maxBatch = 32
		maxDraft = 64
	)
	gg := os.Getenv("DRAFTD_MEM_MODEL")
	perCall := 4 // contexts per fill call: a real model's prefill of 4 × 240 tokens answers within readAnswer's minute
	if gg == "" {
		perCall = 16
		// 16 layers of the tiny Qwen3 per 256 MiB of KV: 8 KiB of f32 KV
		// per position each 16, so that a few hundred contexts fill the
		// cache.
		gg = filepath.Join(t.TempDir(), "m.gguf")
		layers := 16 * max(1, int(kv>>28))
		if _, err := runStdout(t, "testmodel", "--shape", "tiny-qwen3", "--layers", strconv.Itoa(layers), "--type", "q8_0", "--gguf", gg); err != nil {
			t.Fatal(err)
		}
	}
	s := startServe(t, true, "--model", gg, "--kv-cache-bytes", strconv.FormatInt(kv, 10), "--kv-type", "f32",
		"--max-body-bytes", strconv.Itoa(body), "--max-inflight-body-bytes", strconv.Itoa(inflight),
		"--max-queue", strconv.Itoa(maxQueue), "--max-batch", strconv.Itoa(maxBatch), "--max-draft-len", strconv.Itoa(maxDraft),
		"--max-sessions", "1", "--max-session-tokens", "1000000", "--strategy", "model")
	pid := s.cmd.Process.Pid
	healthy := procStatus(t, pid, "VmRSS")
	resp, err := http.Get("http://" + s.addr + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		MaxContext int `json:"max_context"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.MaxContext < 256 {
		t.Fatalf("/v1/info max_context %d (%v); want ≥ 256", info.MaxContext, err)
	}

	// Fill: distinct contexts (each starts with its own id, so no two share
	// a block) of 240 tokens + 16 drafted, 16 blocks each, until the KV
	// cache holds its whole budget.
	budget := s.metricValue("draftd_kv_cache_budget_bytes")
	used := 0.0
	for start := 0; used < 0.95*budget; start += perCall {
		if start >= 512 {
			t.Fatalf("512 contexts fill %.0f of %.0f bytes of KV cache; want it full", used, budget)
		}
		var items []string
		for i := start; i < start+perCall; i++ {
			items = append(items, `{"tokens":`+idsJSON(ctxIDs(i, 240))+`,"n":16}`)
		}
		c := s.dial()
		req := `{"requests":[` + strings.Join(items, ",") + `]}`
		fmt.Fprintf(c, "POST /v1/drafts HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
		st, _, b := readAnswer(t, c)
		c.Close()
		if st != http.StatusOK || strings.Contains(string(b), `"error"`) {
			t.Fatalf("fill: %d %.300s", st, b)
		}
		used = s.metricValue("draftd_kv_cache_bytes")
	}

	// Bodies: a short context padded to 4 MiB by an unknown field.
	pad := `{"tokens":[1,2,3],"n":4,"pad":"`
	b4 := pad + strings.Repeat("x", body-len(pad)-2) + `"}`
	for i := range bodies {
		st, _, b := s.post(b4)
		if st != http.StatusOK {
			t.Fatalf("body %d: %d %.200s", i, st, b)
		}
	}
	peak := procStatus(t, pid, "VmHWM")
	overhead := int64(64<<20) + int64(16*maxQueue+32*maxBatch)*int64(info.MaxContext+maxDraft)
	bound := healthy + kv + inflight + overhead
	mib := func(v int64) float64 { return float64(v) / (1 << 20) }
	t.Logf("RSS healthy %.0f MiB; KV %.0f of %.0f MiB in use; peak after %d bodies of 4 MiB %.0f MiB; bound %.0f MiB (healthy + %.0f KV + %.0f in flight + %.0f overhead)",
		mib(healthy), used/(1<<20), budget/(1<<20), bodies, mib(peak), mib(bound), mib(kv), mib(inflight), mib(overhead))
	if peak > bound {
		t.Errorf("peak RSS %.0f MiB > the bound %.0f MiB", mib(peak), mib(bound))
	}
	// The limit serve states in its log follows from the same flags.
	var rec struct {
		Limit int64 `json:"go_memory_limit"`
	}
	line := s.waitLine(`"msg":"memory limit"`, 10*time.Second)
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Limit <= kv || rec.Limit > bound {
		t.Errorf("memory limit line %s: limit %d; want in (%d, %d]", line, rec.Limit, kv, bound)
	}
}

// TestServeMemoryLimitFromEnv: a GOMEMLIMIT the operator set is kept, and
// the log says so.
func TestServeMemoryLimitFromEnv(t *testing.T) {
	p := startProcEnv(t, []string{"GOMEMLIMIT=300MiB"}, "serve", "--model", tinyGGUF, "--addr", "127.0.0.1:0", "--log-format", "json",
		"--threads", "2", "--kv-cache-bytes", "67108864")
	var rec struct {
		Limit  int64  `json:"go_memory_limit"`
		Source string `json:"source"`
	}
	line := p.waitLine(`"msg":"memory limit"`, 30*time.Second)
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Limit != 300<<20 || rec.Source != "GOMEMLIMIT=300MiB" {
		t.Errorf("memory limit line %s; want go_memory_limit %d from GOMEMLIMIT=300MiB", line, 300<<20)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; want 0", code)
	}
}

// Tests of issue 20 at the command line: prepare removes its own stale
// temporaries beside --out, bounds every message built from a crafted
// checkpoint or a hostile Hub, and serve exits 1 when its drain does not
// finish within --shutdown-timeout.

package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPrepareStaleTemporary: a temporary a killed prepare left beside --out
// (fileio's ".NAME.tmpDIGITS") is removed by the next run; other files are
// not touched.
func TestPrepareStaleTemporary(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "q.gguf")
	stale := filepath.Join(dir, ".q.gguf.tmp2837461")
	keep := []string{filepath.Join(dir, ".q.gguf.tmpx1"), filepath.Join(dir, "q.gguf.tmp5"), filepath.Join(dir, ".other.gguf.tmp42")}
	for _, p := range append([]string{stale}, keep...) {
		if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runStdout(t, "prepare", tinyQwen3, "--out", out, "--quant", "q8_0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary %s still there (%v)", stale, err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: not draftd's pattern for %s", p, out)
		}
	}
}

// copyModel copies the tiny HF model into a fresh directory with config
// edited by edit.
func copyModel(t *testing.T, edit func(map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(tinyQwen3, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(filepath.Join(tinyQwen3, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), w, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkBounded fails when msg has more than maxLines lines or maxBytes bytes.
func checkBounded(t *testing.T, what, msg string, maxLines, maxBytes int) {
	t.Helper()
	if n := strings.Count(msg, "\n") + 1; n > maxLines || len(msg) > maxBytes {
		t.Errorf("%s: %d lines, %d bytes; want at most %d lines and %d bytes:\n%.600s", what, n, len(msg), maxLines, maxBytes, msg)
	}
}

// TestPrepareBoundedErrors: a config.json claiming 4,096 layers of a
// 2-layer checkpoint, and a tensor with 100,000 dimensions, fail prepare
// with a message of a few lines.
func TestPrepareBoundedErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	layers := copyModel(t, func(c map[string]any) { c["num_hidden_layers"] = 4096 })
	_, err := runStdout(t, "prepare", layers, "--out", out, "--quant", "q8_0")
	if err == nil || !strings.Contains(err.Error(), "missing tensor") {
		t.Fatalf("4096 layers: have %v; want missing tensors", err)
	}
	t.Logf("4096 layers: %d lines, %d bytes", strings.Count(err.Error(), "\n")+1, len(err.Error()))
	checkBounded(t, "4096 layers", err.Error(), 15, 4096)

	// model.norm.weight, [64], as [64, 1, 1, …] with 100,000 dimensions: the
	// same bytes, a shape no message should spell out.
	dims := copyModel(t, func(map[string]any) {})
	path := filepath.Join(dims, "model.safetensors")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	var hdr map[string]map[string]any
	if err := json.Unmarshal(raw[8:8+n], &hdr); err != nil {
		t.Fatal(err)
	}
	shape := make([]int, 100000)
	for i := range shape {
		shape[i] = 1
	}
	shape[0] = int(hdr["model.norm.weight"]["shape"].([]any)[0].(float64))
	hdr["model.norm.weight"]["shape"] = shape
	h2, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	f := append(binary.LittleEndian.AppendUint64(nil, uint64(len(h2))), h2...)
	if err := os.WriteFile(path, append(f, raw[8+n:]...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runStdout(t, "prepare", dims, "--out", out, "--quant", "q8_0")
	if err == nil {
		t.Fatal("a tensor of 100,000 dimensions: no error")
	}
	checkBounded(t, "100,000 dimensions", err.Error(), 15, 1024)
}

// TestPrepareOverlongHubBody: a Hub that sends more bytes than its
// Content-Length makes Go's HTTP transport log them; draftd's stderr stays
// a few short lines.
func TestPrepareOverlongHubBody(t *testing.T) {
	h, _ := fakeHubEnv(t)
	h.Overlong["config.json"] = 8192
	h.Overlong["tokenizer_config.json"] = 8192
	out := filepath.Join(t.TempDir(), "x.gguf")
	p := startProc(t, "prepare", "tiny/qwen3", "--out", out, "--quant", "q8_0")
	if code := p.wait(2 * time.Minute); code != 0 {
		t.Fatalf("exit %d; stderr:\n%.2000s", code, p.stderr())
	}
	// A line as a terminal shows it: the progress line rewrites itself
	// after each '\r', and the transport's message may follow one.
	for _, l := range strings.FieldsFunc(p.stderr(), func(r rune) bool { return r == '\n' || r == '\r' }) {
		if len(l) > 1200 {
			t.Errorf("a %d-byte stderr line: %.300s", len(l), l)
		}
	}
	checkBounded(t, "stderr", p.stderr(), 20, 8192)
}

// TestServeDrainTimeoutExits1: a request still being received when
// --shutdown-timeout ends makes serve exit 1, saying the shutdown was
// incomplete.
func TestServeDrainTimeoutExits1(t *testing.T) {
	s := startServe(t, true, "--shutdown-timeout", "500ms")
	s.stalledUpload(1000) // in flight until the body timeout (10 s)
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(30 * time.Second); code != 1 {
		t.Errorf("exit code %d after a drain cut off by --shutdown-timeout; want 1", code)
	}
	if e := s.stderr(); !strings.Contains(e, "shutdown incomplete") {
		t.Errorf("no word of the incomplete shutdown:\n%s", e)
	}
}

// TestServeStalledBodyShutdown: a request whose body stalls (Content-Length
// 100, one byte sent, no Expect: 100-continue) is answered 408 body_timeout
// after --body-timeout and its connection closed; a SIGTERM after that
// answer finds nothing in flight: serve exits 0 without waiting out
// --shutdown-timeout.
func TestServeStalledBodyShutdown(t *testing.T) {
	s := startServe(t, true, "--body-timeout", "500ms", "--shutdown-timeout", "10s")
	c := s.dial()
	defer c.Close()
	io.WriteString(c, "POST /draft HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	s.waitLine(`"status":408`, 30*time.Second) // the request's log line
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("exit code %d after a SIGTERM with the stalled request answered; want 0; stderr:\n%s", code, s.stderr())
	}
	if st, _, b := readAnswer(t, c); st != http.StatusRequestTimeout || errCode(b) != "body_timeout" {
		t.Errorf("stalled body: have %d %s; want 408 body_timeout", st, b)
	}
}

// TestServeDraftVocabFIFO: a named pipe given as --draft-vocab-file fails
// start-up at once with a usage error that names it (as every other file
// flag does), instead of waiting for a writer.
func TestServeDraftVocabFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "vocab.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	p := startProc(t, "serve", "--model", tinyGGUF, "--addr", "127.0.0.1:0", "--draft-vocab", "10", "--draft-vocab-file", fifo)
	if code := p.wait(30 * time.Second); code != 2 {
		t.Errorf("exit code %d; want 2 (usage)", code)
	}
	if e := p.stderr(); !strings.Contains(e, fifo) || !strings.Contains(e, "named pipe") {
		t.Errorf("stderr does not name the FIFO:\n%s", e)
	}
}

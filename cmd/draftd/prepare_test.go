package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/hub/hubtest"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/tokenizer"
)

const tinyQwen3 = "../../testdata/models/tiny-qwen3-bf16"

// byteLevel is GPT-2's byte → printable rune map (bytes_to_unicode).
func byteLevel() [256]rune {
	var m [256]rune
	n := 0
	for b := range 256 {
		if ('!' <= b && b <= '~') || (0xa1 <= b && b <= 0xac) || (0xae <= b && b <= 0xff) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// tinyTokenizer is a byte-level BPE tokenizer.json with 256 byte tokens, two
// merges and the chat special tokens, and a tokenizer_config.json with a
// chat template: small enough for the tiny models' 512-token vocabulary.
func tinyTokenizer(t *testing.T) (tokJSON, tokConfig []byte) {
	bl := byteLevel()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(bl[b])] = b
	}
	vocab["he"], vocab["Ġt"] = 256, 257
	added := []map[string]any{
		{"id": 258, "content": "<|im_start|>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
		{"id": 259, "content": "<|im_end|>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
	}
	doc := map[string]any{
		"version": "1.0", "added_tokens": added, "normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": [][2]string{{"h", "e"}, {"Ġ", "t"}}, "byte_fallback": false},
	}
	var err error
	if tokJSON, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "add_bos_token": false,
		"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"}
	if tokConfig, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	return tokJSON, tokConfig
}

// fakeHubEnv serves the tiny Qwen3 (with a tokenizer) as tiny/qwen3 and
// points the HF_* variables at it and at a fresh cache.
func fakeHubEnv(t *testing.T) (*hubtest.Hub, *hubtest.Repo) {
	h := hubtest.New(t)
	r := h.AddDir(t, "tiny/qwen3", tinyQwen3)
	r.Files["tokenizer.json"], r.Files["tokenizer_config.json"] = tinyTokenizer(t)
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	t.Setenv("DRAFTD_CACHE", t.TempDir())
	return h, r
}

// runStdout runs the command line and returns what it printed on stdout.
func runStdout(t *testing.T, args ...string) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	err = Run(context.Background(), args)
	os.Stdout = old
	w.Close()
	return string(<-done), err
}

// TestPrepareFromHub: `draftd prepare tiny/qwen3 --out F --json` downloads
// through the Hub protocol, picks bf16 (the source's own type, which fits the
// default budget), embeds the tokenizer and chat template, reports the JSON
// the issue names, and the file drafts exactly what the HF directory does.
func TestPrepareFromHub(t *testing.T) {
	_, r := fakeHubEnv(t)
	out := filepath.Join(t.TempDir(), "q.gguf")
	stdout, err := runStdout(t, "prepare", "tiny/qwen3", "--out", out, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"file": out, "bytes": float64(st.Size()), "model": "tiny/qwen3", "revision": r.Commit, "quant": "bf16"} {
		if res[k] != want {
			t.Errorf("%s = %v; want %v", k, res[k], want)
		}
	}
	tt, _ := res["tensor_types"].(map[string]any)
	if tt["BF16"] == nil || tt["F32"] == nil || len(tt) != 2 {
		t.Errorf("tensor_types = %v; want BF16 and F32 counts", res["tensor_types"])
	}
	if p, _ := res["params"].(float64); p <= 0 {
		t.Errorf("params = %v", res["params"])
	}
	tok, err := tokenizer.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tok.ChatTemplate(), "<|im_start|>") {
		t.Errorf("chat template %q not embedded", tok.ChatTemplate())
	}
	if ids := tok.Encode("<|im_end|>he"); len(ids) != 2 || ids[0] != 259 || ids[1] != 256 {
		t.Errorf("embedded tokenizer encodes %v; want [259 256]", ids)
	}
	a, err := model.Load(out, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := model.Load(tinyQwen3, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prompt := []int{5, 77, 300, 12, 511, 0}
	ga, err := a.Generate(prompt, 16)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Generate(prompt, 16)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ga) != fmt.Sprint(gb) {
		t.Errorf("prepared GGUF drafts %v; the HF directory %v", ga, gb)
	}
}

// TestPrepareErrors: usage errors exit 2 (ErrUsage); a budget nothing fits,
// a missing model and an unknown revision are runtime errors that say so
// and leave no file.
func TestPrepareErrors(t *testing.T) {
	fakeHubEnv(t)
	out := filepath.Join(t.TempDir(), "x.gguf")
	for _, args := range [][]string{
		{"prepare", "--out", out},
		{"prepare", tinyQwen3},
		{"prepare", tinyQwen3, "--out", out, "--quant", "q3_k_s"},
		{"prepare", "tiny/qwen3@main", "--revision", "v1", "--out", out},
		{"prepare", tinyQwen3, "extra", "--out", out},
		{"prepare", tinyQwen3, "--out", out, "--max-bytes", "-5"},
	} {
		if _, err := runStdout(t, args...); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: have %v; want a usage error", args, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"prepare", tinyQwen3, "--out", out, "--max-bytes", "1000"}, "no quantization recipe fits"},
		{[]string{"prepare", tinyQwen3, "--out", out, "--quant", "bf16", "--max-bytes", "100000"}, "over --max-bytes 100000"},
		{[]string{"prepare", "./no/such/dir", "--out", out}, "neither a file or directory"},
		{[]string{"prepare", "tiny/qwen3", "--revision", "nope", "--out", out}, `revision "nope"`},
		{[]string{"prepare", "tiny/absent", "--out", out}, "repository tiny/absent"},
	} {
		_, err := runStdout(t, tc.args...)
		if err == nil || errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: have %v; want a runtime error containing %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: left %s behind", tc.args, out)
		}
	}
}

// TestPrepareAutoBudget: with a budget between the q8_0 and bf16 sizes auto
// takes q8_0, and the GGUF re-quantizes to q4_0.
func TestPrepareAutoBudget(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "a.gguf")
	stdout, err := runStdout(t, "prepare", tinyQwen3, "--out", out, "--max-bytes", "200000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res prepareResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Quant != "q8_0" || res.Bytes > 200000 {
		t.Fatalf("have %+v (%v); want q8_0 within 200000 bytes", res, err)
	}
	out2 := filepath.Join(dir, "b.gguf")
	if _, err := runStdout(t, "prepare", out, "--out", out2, "--quant", "q4_0"); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(out2)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ft, _ := f.Uint("general.file_type"); ft != 2 {
		t.Errorf("general.file_type %d; want 2 (Q4_0)", ft)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeFromHub: `draftd serve --model tiny/qwen3@main` answers /health
// 503 while the model downloads and converts, then 200, drafts, and keeps
// the prepared GGUF so an offline restart finds it without the network.
func TestServeFromHub(t *testing.T) {
	h, r := fakeHubEnv(t)
	h.Gate = make(chan struct{})
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--model", "tiny/qwen3@main", "--addr", addr, "--threads", "2"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	health := func() int {
		resp, err := http.Get("http://" + addr + "/health")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for health() != http.StatusServiceUnavailable { // listening, download held at the gate
		if time.Now().After(deadline) {
			t.Fatal("no 503 from /health while preparing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := filepath.Join(os.Getenv("DRAFTD_CACHE"), "models--tiny--qwen3", r.Commit+".gguf")
	if _, err := os.Stat(want); err == nil {
		t.Fatal("prepared file exists while its weights are held at the gate")
	}
	close(h.Gate)
	for st := health(); st != http.StatusOK; st = health() {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("serve exited before healthy: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy after preparing (last %d)", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Post("http://"+addr+"/draft", "application/json", bytes.NewReader([]byte(`{"tokens":[1,2,3],"n":4}`)))
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Draft []int }
	json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if len(d.Draft) != 4 {
		t.Errorf("draft %v; want 4 tokens", d.Draft)
	}
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("prepared file: %v", err)
	}
	h.Reset()
	t.Setenv("HF_HUB_OFFLINE", "1")
	got, err := resolveModel(context.Background(), "tiny/qwen3")
	if err != nil || got != want {
		t.Errorf("offline restart: %q, %v; want %s", got, err, want)
	}
	if n := h.Count(func(string) bool { return true }); n != 0 {
		t.Errorf("offline restart made %d requests", n)
	}
}

// TestResolveLocalLooking: a name that is a valid Hub id but reads as a
// mistyped local path — a model file's extension, or a first element that
// is a local directory — fails naming the missing file, and asks nothing of
// the Hub; a plain Org/Name is still fetched.
func TestResolveLocalLooking(t *testing.T) {
	h, _ := fakeHubEnv(t)
	t.Chdir(t.TempDir())
	if err := os.Mkdir("tm", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tm/m.gguf", "org/model.safetensors", "tm/qwen3", "tiny/qwen3.gguf@main"} {
		_, err := resolveModel(context.Background(), name)
		if err == nil || !strings.Contains(err.Error(), name+": no such file") {
			t.Errorf("%s: have %v; want an error naming the missing file", name, err)
		}
	}
	if n := h.Count(func(string) bool { return true }); n != 0 {
		t.Errorf("%d Hub requests for local-looking names; want 0", n)
	}
	if _, err := resolveModel(context.Background(), "tiny/qwen3"); err != nil {
		t.Errorf("tiny/qwen3 (a Hub id): %v", err)
	}
}

// TestPrepareHeadType: `prepare F.gguf --quant keep --head-type q5_0`
// re-encodes the LM head alone (the JSON names the head type and counts it),
// keeps the source's file type, and the file loads; a head type that is not
// one, or whose blocks do not divide the head's rows, is refused naming it.
func TestPrepareHeadType(t *testing.T) {
	dir := t.TempDir()
	src := "../../testdata/models/tiny-qwen2-q4_0.gguf"
	out := filepath.Join(dir, "h.gguf")
	stdout, err := runStdout(t, "prepare", src, "--out", out, "--quant", "keep", "--head-type", "q5_0", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res prepareResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if res.Quant != "keep" || res.HeadType != "q5_0" || res.TensorTypes["Q5_0"] != 1 || res.TensorTypes["Q4_0"] != 15 {
		t.Errorf("have %+v; want quant keep, head_type q5_0, one Q5_0 tensor and 15 Q4_0", res)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if h, ok := f.Tensor("output.weight"); !ok || h.Type.String() != "Q5_0" {
		t.Errorf("output.weight: %v", h)
	}
	if ft, _ := f.Uint("general.file_type"); ft != 2 {
		t.Errorf("general.file_type %d; want the source's 2", ft)
	}
	m, err := model.Load(out, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := runStdout(t, "prepare", src, "--out", out, "--head-type", "f16"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--head-type") {
		t.Errorf("--head-type f16: have %v; want a usage error naming the flag", err)
	}
	bad := filepath.Join(dir, "bad.gguf")
	_, err = runStdout(t, "prepare", src, "--out", bad, "--quant", "keep", "--head-type", "q6_k")
	if err == nil || errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "rows of 64") {
		t.Errorf("--head-type q6_k on rows of 64: have %v; want a runtime error naming the rows", err)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Error("a refused head type left a file")
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/testmodel"
)

// TestDemo runs the README's main-job command (draftd demo) end to end (small settings):
// models, dataset, server, replay, clean shutdown, and a report with no
// failures and a drafter that is accepted at all.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	err := Run(context.Background(), []string{"demo", "--dir", dir, "--samples", "4", "--tokens", "32", "--threads", "2"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Tau      float64 `json:"tau"`
		Tokens   int     `json:"tokens"`
		Steps    int     `json:"steps"`
		Requests int     `json:"requests"`
		Failures int     `json:"failures"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Failures != 0 || r.Requests == 0 || r.Tokens != 4*32 {
		t.Fatalf("report: %+v; want 128 tokens, requests > 0 and no failures", r)
	}
	if !(r.Tau > 1.5) {
		t.Errorf("τ = %.3f; a drafter made of the target's first layers should beat 1.5", r.Tau)
	}
}

// TestGenerateSameEverywhere checks that `draftd generate` on a model with
// the Qwen3-0.6B shapes (2 of its 28 layers, to keep the test short) prints
// the same tokens with 1 and 2 threads and with the plain-Go kernels
// (-tags purego), for BF16 and Q8_0 weights. The 6-token prompt runs the
// batched (prefill) kernels and each further token the batch-1 ones; the
// plain-Go LM head over 151,936 rows is most of the time, so by default 4
// tokens are generated (3 decode steps); DRAFTD_LONG=1 generates 16 through
// 4 layers.
func TestGenerateSameEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and two 0.2–0.3 GB models")
	}
	layers, n := 2, 4
	if os.Getenv("DRAFTD_LONG") != "" {
		layers, n = 4, 16
	}
	dir := t.TempDir()
	bins := map[string][]string{"asm": nil, "purego": {"-tags", "purego"}}
	for name, tags := range bins {
		args := append([]string{"build", "-o", filepath.Join(dir, "draftd-"+name)}, tags...)
		cmd := exec.Command("go", append(args, ".")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, out)
		}
	}
	for _, typ := range []dtype.Type{dtype.BF16, dtype.Q8_0} {
		spec := testmodel.Qwen3_06B(typ)
		spec.Layers = layers
		path := filepath.Join(dir, spec.Name+".gguf")
		if err := spec.WriteGGUF(path); err != nil {
			t.Fatal(err)
		}
		var first string
		for _, run := range []struct{ bin, threads string }{{"asm", "2"}, {"asm", "1"}, {"purego", "2"}} {
			out, err := exec.Command(filepath.Join(dir, "draftd-"+run.bin), "generate", "--model", path,
				"--prompt-ids", "9707,11,1879,0,151643,42", "-n", strconv.Itoa(n), "--json", "--threads", run.threads).Output()
			if err != nil {
				t.Fatalf("%v %s threads=%s: %v", typ, run.bin, run.threads, err)
			}
			var res struct{ Tokens []int }
			if err := json.Unmarshal(out, &res); err != nil || len(res.Tokens) != n {
				t.Fatalf("%v %s: output %q: %v; want %d tokens", typ, run.bin, out, err, n)
			}
			if first == "" {
				first = string(out)
				t.Logf("%v: %s", typ, out)
			} else if string(out) != first {
				t.Errorf("%v %s threads=%s: have %s; want %s", typ, run.bin, run.threads, out, first)
			}
		}
		os.Remove(path)
	}
}

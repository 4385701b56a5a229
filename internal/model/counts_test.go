//go:build linux

package model_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/model"
)

// craftedEnv, when set, makes TestAbsurdCounts a child that loads the model
// at that path under an address-space limit and prints the error.
const craftedEnv = "DRAFTD_TEST_CRAFTED_MODEL"

// TestAbsurdCounts loads crafted copies of a shipped tiny model whose
// metadata claims absurd counts (layers, heads, widths, context, 10⁶ … 2³²
// and beyond) with the real loader. Every count must be checked against
// what the file holds before anything is allocated from it: the load must
// fail at once with an error naming the key, not run out of memory, panic
// or hang. Each load runs in a child process limited to 4 GiB of address
// space and 60 s, so a loader that allocates from the counts fails the test
// instead of the machine.
func TestAbsurdCounts(t *testing.T) {
	if path := os.Getenv(craftedEnv); path != "" {
		loadCrafted(path)
		return
	}
	dir := t.TempDir()
	type tc struct {
		name, path, want string
	}
	var cases []tc
	type override struct {
		key   string
		value any
	}
	add := func(format string, overrides []override, write func(path, key string, value any)) {
		for _, o := range overrides {
			path := filepath.Join(dir, fmt.Sprintf("%d-%s", len(cases), format))
			write(path, o.key, o.value)
			cases = append(cases, tc{fmt.Sprintf("%s/%s=%v", format, o.key, o.value), path, o.key})
		}
	}
	add("gguf", []override{
		{"qwen3.block_count", uint32(1_000_000)},
		{"qwen3.block_count", uint32(1<<32 - 1)},
		{"qwen3.block_count", uint64(1 << 32)},
		{"qwen3.block_count", uint64(1 << 63)},
		{"qwen3.block_count", uint32(100)}, // plausible, but the file holds 2 layers
		{"qwen3.attention.head_count", uint32(1 << 31)},
		{"qwen3.attention.head_count_kv", uint32(1 << 31)},
		{"qwen3.attention.key_length", uint32(1 << 30)},
		{"qwen3.embedding_length", uint64(1 << 40)},
		{"qwen3.feed_forward_length", uint64(1 << 40)},
		{"qwen3.context_length", uint64(1 << 32)},
	}, func(path, key string, value any) {
		writeGGUFWith(t, filepath.Join(modelsDir, "tiny-qwen3-f32.gguf"), path, key, value)
	})
	add("hf", []override{
		{"num_hidden_layers", 1_000_000},
		{"num_hidden_layers", int64(1 << 32)},
		{"num_hidden_layers", 100},
		{"num_attention_heads", 1 << 31},
		{"num_key_value_heads", 1 << 31},
		{"head_dim", 1 << 30},
		{"hidden_size", int64(1 << 40)},
		{"intermediate_size", int64(1 << 40)},
		{"vocab_size", int64(1 << 40)},
		{"max_position_embeddings", int64(1 << 32)},
	}, func(path, key string, value any) {
		writeHFWith(t, filepath.Join(modelsDir, "tiny-qwen3-f32"), path, key, value)
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAbsurdCounts$", "-test.count=1")
			cmd.Env = append(os.Environ(), craftedEnv+"="+c.path)
			out, err := cmd.Output()
			if ctx.Err() != nil {
				t.Fatalf("load did not finish within 60 s")
			}
			var res struct{ Err string }
			if err != nil || json.Unmarshal(lastLine(out), &res) != nil {
				t.Fatalf("load crashed (%v): %s", err, tail(out, 2000))
			}
			t.Logf("%s", tail([]byte(res.Err), 300))
			if res.Err == "" {
				t.Fatalf("loaded a model whose %s is absurd; want an error", c.want)
			}
			if !strings.Contains(res.Err, c.want) {
				t.Errorf("error %q does not name %s", tail([]byte(res.Err), 500), c.want)
			}
			if len(res.Err) > 2000 {
				t.Errorf("error is %d bytes long; want a short one", len(res.Err))
			}
		})
	}
}

// loadCrafted is the child: load under a 4 GiB address-space limit, print
// {"Err": ...} as the last line and exit.
func loadCrafted(path string) {
	lim := &syscall.Rlimit{Cur: 4 << 30, Max: 4 << 30}
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, lim); err != nil {
		fmt.Printf("\n{\"Err\":%q}\n", "setrlimit: "+err.Error())
		os.Exit(3)
	}
	m, err := model.Load(path, model.Options{Threads: 1})
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		m.Close()
	}
	b, _ := json.Marshal(struct{ Err string }{msg})
	fmt.Printf("\n%s\n", b)
	os.Exit(0)
}

// writeGGUFWith copies the GGUF at src to dst with key set to value.
func writeGGUFWith(t *testing.T, src, dst, key string, value any) {
	t.Helper()
	rewriteGGUF(t, src, dst, map[string]any{key: value}, nil)
}

// writeHFWith copies the HF directory src to dst with config.json's key set
// to value.
func writeHFWith(t *testing.T, src, dst, key string, value any) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg = maps.Clone(cfg)
	cfg[key] = value
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(must(filepath.Abs(src)), "model.safetensors"), filepath.Join(dst, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func lastLine(b []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return []byte(lines[len(lines)-1])
}

func tail(b []byte, n int) string {
	if len(b) > n {
		return "…" + string(b[len(b)-n:])
	}
	return string(b)
}

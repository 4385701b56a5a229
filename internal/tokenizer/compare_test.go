// Comparison with independent JavaScript implementations on a generated
// corpus (testdata/tokenizer/gen_expected.js): transformers.js's Qwen3
// tokenizer for encoding, pre-tokenization and decoding, Hugging Face's Jinja
// engine for the chat template. Every difference fails the test.

package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/draftd/draftd/internal/gguf"
)

// record is one line of expected.jsonl.
type record struct {
	Kind   string   `json:"kind"`
	Cat    string   `json:"cat"`
	Text   string   `json:"text"`
	IDs    []int    `json:"ids"`
	Plain  []int    `json:"plain"`
	Pieces []string `json:"pieces"`

	Messages            []Message `json:"messages"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
	EnableThinking      *bool     `json:"enable_thinking"`

	Counts                    map[string]int    `json:"counts"`
	Packages                  map[string]string `json:"packages"`
	EncodeTextBytes           int               `json:"encode_text_bytes"`
	UnpatchedReferenceDiffers int               `json:"unpatched_reference_differs"`
}

func readExpected(tb testing.TB) (meta record, recs []record) {
	tb.Helper()
	needFile(tb, refExpected)
	meta, recs, err := loadExpected(refExpected)
	if err != nil {
		tb.Fatal(err)
	}
	return meta, recs
}

func loadExpected(path string) (meta record, recs []record, err error) {
	f, err := os.Open(path)
	if err != nil {
		return meta, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return meta, nil, fmt.Errorf("%s: %v", path, err)
		}
		if r.Kind == "meta" {
			meta = r
			continue
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return meta, nil, err
	}
	if meta.Kind != "meta" {
		return meta, nil, fmt.Errorf("%s has no meta line", path)
	}
	return meta, recs, nil
}

// diff describes where two id sequences first differ, with the tokens there.
func diff(tk *Tokenizer, have, want []int) string {
	i := 0
	for i < len(have) && i < len(want) && have[i] == want[i] {
		i++
	}
	show := func(ids []int) string {
		lo, hi := max(i-2, 0), min(i+4, len(ids))
		var parts []string
		for _, id := range ids[lo:hi] {
			p, _, _ := tk.Token(id)
			parts = append(parts, fmt.Sprintf("%d:%q", id, p))
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("first difference at %d (len %d vs %d)\n\thave ... %s\n\twant ... %s", i, len(have), len(want), show(have), show(want))
}

// encodeDiffs compares tk with the reference ids; it returns the number of
// strings and of differences, reporting the first few.
func encodeDiffs(t *testing.T, tk *Tokenizer, recs []record) (n, bad int) {
	for _, r := range recs {
		if r.Kind != "encode" {
			continue
		}
		n++
		if have := tk.Encode(r.Text); !slices.Equal(have, r.IDs) {
			if bad++; bad <= 5 {
				t.Errorf("Encode(%q) [%s]: %s", trunc(r.Text), r.Cat, diff(tk, have, r.IDs))
			}
		}
		if r.Plain != nil {
			if have := tk.EncodePlain(r.Text); !slices.Equal(have, r.Plain) {
				if bad++; bad <= 5 {
					t.Errorf("EncodePlain(%q) [%s]: %s", trunc(r.Text), r.Cat, diff(tk, have, r.Plain))
				}
			}
		}
	}
	return n, bad
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func TestCompareWithJavaScript(t *testing.T) {
	tk := qwen3(t)
	meta, recs := readExpected(t)
	t.Logf("reference: %v; unpatched transformers.js regex differs on %d strings (U+0085/U+FEFF/U+017F, see gen_expected.js)",
		meta.Packages, meta.UnpatchedReferenceDiffers)

	t.Run("encode", func(t *testing.T) {
		n, bad := encodeDiffs(t, tk, recs)
		t.Logf("encode: %d strings (%d bytes), %d differences", n, meta.EncodeTextBytes, bad)
		if n < 5000 {
			t.Errorf("only %d strings in the corpus; want thousands", n)
		}
	})

	t.Run("pretokenize", func(t *testing.T) {
		n, bad := 0, 0
		for _, r := range recs {
			if r.Kind != "encode" || r.Pieces == nil {
				continue
			}
			n++
			s := norm.NFC.String(r.Text)
			var have []string
			forEachPiece(s, func(i, j int) { have = append(have, byteLevelEncode([]byte(s[i:j]))) })
			if !slices.Equal(have, r.Pieces) {
				if bad++; bad <= 5 {
					t.Errorf("pieces of %q:\n\thave %q\n\twant %q", trunc(r.Text), have, r.Pieces)
				}
			}
		}
		t.Logf("pre-tokenizer: %d strings, %d differences", n, bad)
	})

	t.Run("roundtrip", func(t *testing.T) {
		n := 0
		for _, r := range recs {
			if r.Kind != "encode" || !norm.NFC.IsNormalString(r.Text) {
				continue
			}
			n++
			if have, err := tk.Decode(r.IDs); err != nil || have != r.Text {
				t.Errorf("Decode(Encode(%q)) = %q, %v", trunc(r.Text), trunc(have), err)
			}
		}
		t.Logf("round trip: %d NFC strings", n)
	})

	t.Run("decode", func(t *testing.T) {
		n, bad := 0, 0
		for _, r := range recs {
			if r.Kind != "decode" {
				continue
			}
			n++
			have, err := tk.Decode(r.IDs)
			if err != nil || have != r.Text {
				if bad++; bad <= 5 {
					t.Errorf("Decode(%v) = %q, %v; want %q", r.IDs, have, err, r.Text)
				}
			}
		}
		t.Logf("decode: %d id sequences, %d differences", n, bad)
	})

	t.Run("chat", func(t *testing.T) {
		n, bad := 0, 0
		for _, r := range recs {
			if r.Kind != "chat" {
				continue
			}
			n++
			thinking := r.EnableThinking == nil || *r.EnableThinking
			have, err := tk.ApplyChatTemplate(r.Messages, r.AddGenerationPrompt, thinking)
			if err != nil || have != r.Text {
				if bad++; bad <= 5 {
					t.Errorf("ApplyChatTemplate(%+v, %v, %v) = %q, %v\nwant %q", r.Messages, r.AddGenerationPrompt, thinking, have, err, r.Text)
				}
				continue
			}
			ids, err := tk.EncodeChat(r.Messages, r.AddGenerationPrompt, thinking)
			if err != nil || !slices.Equal(ids, r.IDs) {
				if bad++; bad <= 5 {
					t.Errorf("EncodeChat: %v %s", err, diff(tk, ids, r.IDs))
				}
			}
		}
		t.Logf("chat template: %d conversations, %d differences", n, bad)
	})

	// The same tokenizer written to GGUF metadata and read back must encode
	// identically.
	t.Run("gguf", func(t *testing.T) {
		w := gguf.NewWriter()
		if err := tk.WriteGGUFPadded(w, 151936); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse("qwen3.gguf", buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		gt, err := FromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		if gt.VocabSize() != 151936 {
			t.Errorf("VocabSize() = %d; want 151936", gt.VocabSize())
		}
		n, bad := 0, 0
		for _, r := range recs {
			if r.Kind != "encode" {
				continue
			}
			n++
			if have := gt.Encode(r.Text); !slices.Equal(have, r.IDs) {
				if bad++; bad <= 5 {
					t.Errorf("GGUF Encode(%q): %s", trunc(r.Text), diff(gt, have, r.IDs))
				}
			}
		}
		t.Logf("from GGUF: encode %d strings, %d differences", n, bad)

		// And on to Hugging Face files (`draftd export`): read back, the
		// tokenizer still encodes and renders chats as the reference does.
		tj, err := gt.HFTokenizerJSON()
		if err != nil {
			t.Fatal(err)
		}
		tc, err := gt.HFTokenizerConfig(40960)
		if err != nil {
			t.Fatal(err)
		}
		ht, err := FromHF(tj, tc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, bad = 0, 0
		for _, r := range recs {
			switch r.Kind {
			case "encode":
				n++
				if have := ht.Encode(r.Text); !slices.Equal(have, r.IDs) {
					if bad++; bad <= 5 {
						t.Errorf("GGUF → HF Encode(%q): %s", trunc(r.Text), diff(ht, have, r.IDs))
					}
				}
			case "chat":
				n++
				thinking := r.EnableThinking == nil || *r.EnableThinking
				if have, err := ht.ApplyChatTemplate(r.Messages, r.AddGenerationPrompt, thinking); err != nil || have != r.Text {
					if bad++; bad <= 5 {
						t.Errorf("GGUF → HF ApplyChatTemplate = %q, %v\nwant %q", have, err, r.Text)
					}
				}
			}
		}
		t.Logf("GGUF → HF files: %d strings and chats, %d differences", n, bad)
	})
}

package tokenizer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/draftd/draftd/internal/gguf"
)

// benchTexts are ~1 MB inputs of different kinds.
func benchTexts(b *testing.B) map[string]string {
	b.Helper()
	const mb = 1 << 20
	fill := func(parts ...string) string {
		var sb strings.Builder
		for i := 0; sb.Len() < mb; i++ {
			sb.WriteString(parts[i%len(parts)])
		}
		return sb.String()
	}
	texts := map[string]string{
		"english": fill("The quick brown fox jumps over the lazy dog. ", "It's what they'd call a speculative-decoding drafter; ",
			"acceptance rates of 3.7 tokens per step aren't unusual.\n", "Tokenizers split text into pieces, then merge bytes by rank. "),
		"code": fill("func (t *Tokenizer) Encode(text string) []int {\n\treturn t.encode(text, false)\n}\n",
			"for (int i = 0; i < n; i++) { sum += x[i] * y[i]; }\r\n", "    def forward(self, x):\n        return self.proj(x) + 1e-6\n"),
		"cjk":  fill("我想在苹果公司工作。今天天气很好，我们去公园散步吧！", "東京は日本の首都です。ひらがなとカタカナ。", "안녕하세요, 만나서 반갑습니다. "),
		"chat": fill("<|im_start|>user\nExplain BPE merges.<|im_end|>\n<|im_start|>assistant\n<think>\nThe user asks about BPE.\n</think>\n\nBPE merges the most frequent pair.<|im_end|>\n"),
	}
	if _, recs, err := loadExpected(refExpected); err == nil {
		var sb strings.Builder
		for _, r := range recs {
			if r.Kind == "encode" && r.Cat != "bytes" && r.Cat != "codepoints" {
				sb.WriteString(r.Text)
			}
		}
		texts["corpus"] = sb.String()
	}
	return texts
}

func BenchmarkEncode(b *testing.B) {
	tk := qwen3(b)
	for name, text := range benchTexts(b) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tk.Encode(text)
			}
		})
	}
}

func BenchmarkEncodeParallel(b *testing.B) {
	tk := qwen3(b)
	text := benchTexts(b)["english"][:64<<10]
	b.SetBytes(int64(len(text)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk.Encode(text)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	tk := qwen3(b)
	text := benchTexts(b)["english"]
	ids := tk.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := tk.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadJSON(b *testing.B) {
	qwen3(b)
	for b.Loop() {
		if _, err := Load(refModelDir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadGGUF(b *testing.B) {
	tk := qwen3(b)
	w := gguf.NewWriter()
	if err := tk.WriteGGUFPadded(w, 151936); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		f, err := gguf.Parse("q.gguf", buf.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := FromGGUF(f); err != nil {
			b.Fatal(err)
		}
	}
}

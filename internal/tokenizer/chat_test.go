package tokenizer

import (
	"errors"
	"os"
	"testing"
)

const qwen3TemplateFile = "../../testdata/tokenizer/qwen3_chat_template.jinja"

// TestQwen3ChatTemplate renders Qwen3's official chat template, unchanged,
// with the Jinja engine, against outputs worked out by hand from the
// template (and matching Qwen3's model card). The JavaScript comparison
// covers hundreds of random conversations on top of these.
func TestQwen3ChatTemplate(t *testing.T) {
	src, err := os.ReadFile(qwen3TemplateFile)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := NewChatTemplate(string(src), map[string]string{"eos_token": "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	const think = "<think>\nI should greet.\n</think>\n\nHello!"
	tests := []struct {
		name     string
		msgs     []Message
		gen      bool
		thinking bool
		want     string
	}{
		{"user", []Message{{"user", "Hi"}}, true, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"no thinking", []Message{{"user", "Hi"}}, true, false,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{"no generation prompt", []Message{{"user", "Hi"}}, false, false,
			"<|im_start|>user\nHi<|im_end|>\n"},
		{"system", []Message{{"system", "Be brief."}, {"user", "Hi"}}, true, true,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"history drops reasoning", []Message{{"user", "Hi"}, {"assistant", think}, {"user", "Again"}}, true, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"},
		{"last turn keeps reasoning", []Message{{"user", "Hi"}, {"assistant", think}}, false, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nI should greet.\n</think>\n\nHello!<|im_end|>\n"},
		{"last turn without reasoning", []Message{{"user", "Hi"}, {"assistant", "\n\nHello!"}}, false, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n"},
		{"only newlines stripped", []Message{{"user", "Hi"}, {"assistant", "<think>\n  r  \n</think>\n  x"}}, false, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n  r  \n</think>\n\n  x<|im_end|>\n"},
		{"tool responses grouped", []Message{{"user", "Hi"}, {"assistant", "call"}, {"tool", "A"}, {"tool", "B"}}, true, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\ncall<|im_end|>\n<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
		{"late system", []Message{{"user", "Hi"}, {"system", "Now terse."}}, false, true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nNow terse.<|im_end|>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			have, err := tmpl.Apply(tt.msgs, tt.gen, tt.thinking)
			if err != nil {
				t.Fatal(err)
			}
			if have != tt.want {
				t.Errorf("have %q\nwant %q", have, tt.want)
			}
		})
	}
}

// TestQwen3TemplateIsOfficial checks that the copy used above is the
// template of the published tokenizer_config.json.
func TestQwen3TemplateIsOfficial(t *testing.T) {
	tk := qwen3(t)
	src, err := os.ReadFile(qwen3TemplateFile)
	if err != nil {
		t.Fatal(err)
	}
	if tk.ChatTemplate() != string(src) {
		t.Errorf("%s differs from the chat_template of %s", qwen3TemplateFile, refModelDir)
	}
	ids, err := tk.EncodeChat([]Message{{"user", "Hi"}}, true, false)
	want := []int{151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271}
	if err != nil || len(ids) != len(want) {
		t.Fatalf("EncodeChat = %v, %v; want %v", ids, err, want)
	}
	for i := range ids {
		if ids[i] != want[i] {
			t.Fatalf("EncodeChat = %v; want %v", ids, want)
		}
	}
}

func TestChatTemplateErrors(t *testing.T) {
	if _, err := NewChatTemplate("", nil); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("empty template: %v", err)
	}
	if _, err := NewChatTemplate("{% if %}", nil); err == nil {
		t.Error("bad template compiled")
	}
	tmpl, err := NewChatTemplate("{{ bos_token }}{{ messages[0].content }}", map[string]string{"bos_token": "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := tmpl.Apply([]Message{{"user", "x"}}, false, true); s != "<s>x" || err != nil {
		t.Errorf("Apply = %q, %v", s, err)
	}
	if _, err := tmpl.Apply(nil, false, true); err == nil {
		t.Error("Apply(no messages) succeeded")
	}
	tk := tiny(t, nil, nil)
	if _, err := tk.ApplyChatTemplate([]Message{{"user", "x"}}, true, true); !errors.Is(err, ErrNoChatTemplate) {
		t.Errorf("tokenizer without template: %v", err)
	}
}

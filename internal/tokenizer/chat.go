// Chat templates: the model's own Jinja chat_template (tokenizer_config.json
// or GGUF tokenizer.chat_template) rendered with github.com/ardanlabs/jinja,
// with the variables Hugging Face's apply_chat_template passes. There is no
// hand-written template for any model here.

package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatTemplate is a compiled chat template, safe for concurrent use.
type ChatTemplate struct {
	tmpl     *jinja.Template
	specials map[string]any // bos_token, eos_token, pad_token when known
}

// NewChatTemplate compiles a Jinja chat template. specials maps template
// variables such as "bos_token" and "eos_token" to token text; it may be nil.
func NewChatTemplate(source string, specials map[string]string) (*ChatTemplate, error) {
	if source == "" {
		return nil, ErrNoChatTemplate
	}
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: chat template: %w", err)
	}
	c := &ChatTemplate{tmpl: tmpl, specials: map[string]any{}}
	for k, v := range specials {
		c.specials[k] = v
	}
	return c, nil
}

// Apply renders msgs. addGenerationPrompt appends the opening of an
// assistant turn; enableThinking=false is Qwen3's enable_thinking=False
// (an empty <think></think> block), true leaves the template's default.
func (c *ChatTemplate) Apply(msgs []Message, addGenerationPrompt, enableThinking bool) (string, error) {
	if len(msgs) == 0 {
		return "", fmt.Errorf("tokenizer: chat template: no messages")
	}
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := make(map[string]any, len(c.specials)+3)
	for k, v := range c.specials {
		data[k] = v
	}
	data["messages"] = list
	data["add_generation_prompt"] = addGenerationPrompt
	data["enable_thinking"] = enableThinking
	out, err := c.tmpl.Render(data)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat template: %w", err)
	}
	return out, nil
}

// chatTemplate compiles the tokenizer's template once.
func (t *Tokenizer) chatTemplate() (*ChatTemplate, error) {
	t.tmplOnce.Do(func() { t.tmpl, t.tmplErr = t.NewChatTemplate(t.template) })
	return t.tmpl, t.tmplErr
}

// ApplyChatTemplate renders msgs with the tokenizer's chat template (see
// ChatTemplate.Apply).
func (t *Tokenizer) ApplyChatTemplate(msgs []Message, addGenerationPrompt, enableThinking bool) (string, error) {
	c, err := t.chatTemplate()
	if err != nil {
		return "", err
	}
	return c.Apply(msgs, addGenerationPrompt, enableThinking)
}

// EncodeChat renders msgs and encodes the result with special tokens
// recognised, as apply_chat_template(tokenize=True) does.
func (t *Tokenizer) EncodeChat(msgs []Message, addGenerationPrompt, enableThinking bool) ([]int, error) {
	s, err := t.ApplyChatTemplate(msgs, addGenerationPrompt, enableThinking)
	if err != nil {
		return nil, err
	}
	return t.Encode(s), nil
}

// NewChatTemplate compiles source with this tokenizer's special tokens
// (bos_token, eos_token, pad_token) as template variables: for rendering a
// template that comes from elsewhere than the tokenizer's own files.
func (t *Tokenizer) NewChatTemplate(source string) (*ChatTemplate, error) {
	return NewChatTemplate(source, t.specialTokenNames())
}

func (t *Tokenizer) specialTokenNames() map[string]string {
	m := map[string]string{}
	for name, id := range map[string]int{"bos_token": t.bos, "eos_token": t.eos, "pad_token": t.pad} {
		if id >= 0 {
			m[name] = t.raw[id]
		}
	}
	return m
}

// ReadChatTemplate returns the chat template in a file: the chat_template
// of a tokenizer_config.json (a string, or the "default" of a list), or a
// whole .jinja file.
func ReadChatTemplate(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	if strings.HasSuffix(path, ".jinja") {
		return string(data), nil
	}
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrBadTokenizer, path, err)
	}
	if len(c.ChatTemplate) == 0 || string(c.ChatTemplate) == "null" {
		return "", fmt.Errorf("%s: %w", path, ErrNoChatTemplate)
	}
	return parseChatTemplateField(c.ChatTemplate)
}

// draftd chat-template: renders a conversation with the model's own Jinja
// chat template (tokenizer_config.json, chat_template.jinja or GGUF
// tokenizer.chat_template) and prints the prompt and its token ids. The
// rendering and tokenizing live in internal/tokenizer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("chat-template", "render messages with the model's chat template and print the prompt and its ids", runChatTemplate)
}

func runChatTemplate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("chat-template", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		configPath = fs.String("tokenizer-config", "", "tokenizer_config.json (or a .jinja file) holding the chat template; the tokenizer.json beside it encodes the prompt unless --tokenizer is given")
		tokPath    = fs.String("tokenizer", "", "tokenizer.json, a Hugging Face model directory, or a GGUF file; its own template is used without --tokenizer-config")
		msgsPath   = fs.String("messages", "", `JSON file of [{"role":...,"content":...}] or {"messages":[...]}, - for standard input (required)`)
		thinking   = fs.Bool("thinking", true, "Qwen3 enable_thinking; --thinking=false appends an empty <think></think> block")
		genPrompt  = fs.Bool("add-generation-prompt", true, "end with the opening of the assistant's turn")
		asJSON     = fs.Bool("json", false, `print {"prompt":"...","ids":[...]}`)
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd chat-template (--tokenizer-config PATH | --tokenizer PATH) --messages m.json [--thinking=false] [--json]\n\n"+
			"Prints the rendered prompt, then a line \"ids (N): ...\" with its token ids\n"+
			"(special tokens recognised, as apply_chat_template(tokenize=True) does).\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case *msgsPath == "":
		return clientUsageError(fs, "--messages is required")
	case *configPath == "" && *tokPath == "":
		return clientUsageError(fs, "give --tokenizer-config, --tokenizer, or both")
	}
	msgs, err := readMessages(*msgsPath)
	if err != nil {
		return err
	}
	if *tokPath == "" {
		*tokPath = filepath.Join(filepath.Dir(*configPath), "tokenizer.json")
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return err
	}
	var prompt string
	if *configPath != "" {
		src, err := tokenizer.ReadChatTemplate(*configPath)
		if err != nil {
			return err
		}
		tmpl, err := tok.NewChatTemplate(src)
		if err != nil {
			return err
		}
		prompt, err = tmpl.Apply(msgs, *genPrompt, *thinking)
		if err != nil {
			return err
		}
	} else if prompt, err = tok.ApplyChatTemplate(msgs, *genPrompt, *thinking); err != nil {
		return err
	}
	ids := tok.Encode(prompt)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			Prompt string `json:"prompt"`
			IDs    []int  `json:"ids"`
		}{prompt, ids})
	}
	fmt.Print(prompt)
	if len(prompt) > 0 && prompt[len(prompt)-1] != '\n' {
		fmt.Println()
	}
	fmt.Printf("ids (%d): ", len(ids))
	return printIDs(os.Stdout, ids, false)
}

// readMessages reads [{"role","content"}] or {"messages":[...]}.
func readMessages(path string) ([]tokenizer.Message, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	var msgs []tokenizer.Message
	if err := json.Unmarshal(data, &msgs); err != nil {
		var wrapped struct {
			Messages []tokenizer.Message `json:"messages"`
		}
		if err2 := json.Unmarshal(data, &wrapped); err2 != nil || wrapped.Messages == nil {
			return nil, fmt.Errorf("%s: want a JSON array of {\"role\",\"content\"} or {\"messages\":[...]}: %v", path, err)
		}
		msgs = wrapped.Messages
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%s: no messages", path)
	}
	return msgs, nil
}

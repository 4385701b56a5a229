// draftd generate: the greedy continuation of a prompt of token ids, computed
// by one sequence with a private KV cache. It is the reference the server's
// drafts are checked against; it does not batch or cache across calls.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/draftd/draftd/internal/model"
)

func init() {
	register("generate", "greedy continuation of token ids with a model", runGenerate)
}

func runGenerate(ctx context.Context, args []string) error {
	fs := newFlags("generate", "generate --model PATH (--prompt-ids IDS | --prompt-file FILE) [-n N] [flags]", "")
	path := fs.String("model", "", "model: a .gguf file or an HF directory (required)")
	idsFlag := fs.String("prompt-ids", "", "prompt token ids, e.g. 1,2,3")
	idsFile := fs.String("prompt-file", "", "file of prompt token ids (comma/space separated or a JSON array)")
	n := fs.Int("n", 16, "number of tokens to generate")
	asJSON := fs.Bool("json", false, `print {"tokens":[...]}`)
	threads := fs.Int("threads", 0, "kernel worker threads (0: all cores)")
	kvType := kvTypeFlag(fs)
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	kv, kvMsg := kvType()
	if kvMsg != "" {
		return clientUsageError(fs, kvMsg)
	}
	if *path == "" {
		return clientUsageError(fs, "--model is required")
	}
	if (*idsFlag == "") == (*idsFile == "") {
		return clientUsageError(fs, "give exactly one of --prompt-ids and --prompt-file")
	}
	if *n < 1 {
		return clientUsageError(fs, fmt.Sprintf("-n %d must be ≥ 1", *n))
	}
	if err := checkThreads(*threads); err != nil {
		return clientUsageError(fs, err.Error())
	}
	var prompt []int
	var err error
	if *idsFlag != "" {
		prompt, err = parseIDs(*idsFlag)
	} else {
		prompt, err = readIDsFile(*idsFile)
	}
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if len(prompt) == 0 {
		return errors.New("generate: the prompt is empty")
	}
	var m *model.Model
	err = interruptible(ctx, func() (err error) {
		m, err = model.Load(*path, model.Options{Threads: *threads, KV: kv})
		return err
	})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	defer m.Close()
	for i, id := range prompt {
		if id < 0 || id >= m.Vocab {
			return fmt.Errorf("generate: prompt id %d at index %d is outside the vocabulary [0, %d)", id, i, m.Vocab)
		}
	}
	var out []int
	err = interruptible(ctx, func() (err error) {
		out, err = m.Generate(prompt, *n)
		return err
	})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if len(out) < *n {
		fmt.Fprintf(os.Stderr, "draftd generate: stopped after %d tokens at the model's maximum context of %d\n", len(out), m.MaxContext)
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string][]int{"tokens": out})
	}
	s := make([]string, len(out))
	for i, id := range out {
		s[i] = fmt.Sprint(id)
	}
	fmt.Println(strings.Join(s, " "))
	return nil
}

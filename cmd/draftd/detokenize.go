// draftd detokenize: token ids → text with the model's tokenizer. Bytes that
// do not form UTF-8 (a character cut between tokens) print as U+FFFD, as
// Hugging Face decodes them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("detokenize", "token ids to text with the model's tokenizer", runDetokenize)
}

func runDetokenize(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("detokenize", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		tokPath = fs.String("tokenizer", "", "tokenizer.json, a Hugging Face model directory, or a GGUF file (required)")
		idList  = fs.String("ids", "", `token ids: "1,2,3", "1 2 3" or "[1,2,3]"`)
		idsFile = fs.String("ids-file", "", "file with token ids in any of the --ids forms")
		asJSON  = fs.Bool("json", false, `print {"text":"..."} (exact, escaped) instead of the text and a newline`)
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd detokenize --tokenizer PATH (--ids 1,2,3 | --ids-file F) [--json]\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	switch {
	case *tokPath == "":
		return clientUsageError(fs, "--tokenizer is required")
	case (*idList == "") == (*idsFile == ""):
		return clientUsageError(fs, "give exactly one of --ids and --ids-file")
	}
	var ids []int
	var err error
	if *idsFile != "" {
		ids, err = readIDsFile(*idsFile)
	} else {
		ids, err = parseIDs(*idList)
	}
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return err
	}
	text, err := tok.Decode(ids)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			Text string `json:"text"`
		}{text})
	}
	_, err = fmt.Println(text)
	return err
}

// draftd tokenize: text → token ids with the model's tokenizer (a
// tokenizer.json, a Hugging Face model directory, or a GGUF file). It only
// prints ids; the tokenizer itself is internal/tokenizer.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/draftd/draftd/internal/tokenizer"
)

func init() {
	register("tokenize", "text to token ids with the model's tokenizer", runTokenize)
}

func runTokenize(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var (
		tokPath = fs.String("tokenizer", "", "tokenizer.json, a Hugging Face model directory, or a GGUF file (required)")
		text    = fs.String("text", "", "text to encode")
		file    = fs.String("file", "", "file to encode, - for standard input")
		asJSON  = fs.Bool("json", false, `print {"ids":[...]} instead of comma-separated ids`)
		plain   = fs.Bool("plain", false, "do not recognise special tokens such as <|im_start|> in the text")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: draftd tokenize --tokenizer PATH (--text T | --file F) [--json] [--plain]\n\n"+
			"Prints the token ids of the text, comma-separated (the form detokenize --ids takes).\n"+
			"The text is encoded as is: nothing is prepended or appended.\n\nflags:")
		fs.PrintDefaults()
	}
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	textSet := false
	fs.Visit(func(f *flag.Flag) { textSet = textSet || f.Name == "text" })
	switch {
	case *tokPath == "":
		return clientUsageError(fs, "--tokenizer is required")
	case textSet == (*file != ""):
		return clientUsageError(fs, "give exactly one of --text and --file")
	}
	input := *text
	if *file != "" {
		var data []byte
		var err error
		if *file == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(*file)
		}
		if err != nil {
			return err
		}
		input = string(data)
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return err
	}
	var ids []int
	if *plain {
		ids = tok.EncodePlain(input)
	} else {
		ids = tok.Encode(input)
	}
	return printIDs(os.Stdout, ids, *asJSON)
}

// printIDs writes ids as {"ids":[...]} or comma-separated, on one line.
func printIDs(w io.Writer, ids []int, asJSON bool) error {
	if asJSON {
		if ids == nil {
			ids = []int{}
		}
		return json.NewEncoder(w).Encode(struct {
			IDs []int `json:"ids"`
		}{ids})
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	_, err := fmt.Fprintln(w, strings.Join(parts, ","))
	return err
}

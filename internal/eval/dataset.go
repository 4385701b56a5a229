// Package eval replays evaluation datasets against a drafter service and
// measures what docs/evaluation.md defines: mean acceptance length τ, the acceptance
// histogram and per-position rates, request latency and throughput. It also
// drives the synthetic load of `draftd bench`.
//
// This file is the dataset reader (JSON Lines, docs/evaluation.md). It is not a
// tokenizer: the text form of a sample is tokenized through a TextEncoder the
// caller supplies.
package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Sample is one dataset line in token form: the target model's greedy
// Continuation after Prompt.
type Sample struct {
	ID           string
	Prompt       []int // (promptLen) token ids, non-empty
	Continuation []int // (contLen) token ids, non-empty
}

// Message is one chat turn of the text form of a sample.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// TextEncoder tokenizes the text form of a sample: EncodeChat renders the
// messages with the model's chat template (generation prompt included) and
// tokenizes them; Encode tokenizes plain text with no special tokens added.
type TextEncoder interface {
	EncodeChat(msgs []Message) ([]int, error)
	Encode(text string) ([]int, error)
}

// ErrNoEncoder is wrapped by the error for a text-form line read without a
// TextEncoder.
var ErrNoEncoder = errors.New("text-form sample needs a tokenizer (--tokenizer)")

// LineError reports a dataset line that cannot be used.
type LineError struct {
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// line is the union of the two JSON forms of a dataset line.
type line struct {
	ID               json.RawMessage `json:"id"`
	Prompt           *[]int          `json:"prompt"`
	Continuation     *[]int          `json:"continuation"`
	Messages         *[]Message      `json:"messages"`
	ContinuationText *string         `json:"continuation_text"`
}

// ParseLine parses one non-blank dataset line. lineNo (1-based) names the
// sample when the line has no id. enc may be nil when only token-form lines
// are expected. Errors are not wrapped in LineError; ReadDataset does that.
func ParseLine(data []byte, lineNo int, enc TextEncoder) (Sample, error) {
	var l line
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&l); err != nil {
		return Sample{}, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return Sample{}, errors.New("more than one JSON value on the line")
	}
	if l.Prompt == nil && l.Continuation == nil && l.Messages == nil && l.ContinuationText == nil {
		// Also catches a line that is JSON null, a number or a string.
		return Sample{}, errors.New(`want an object with "prompt" and "continuation" (token ids) or "messages" and "continuation_text"`)
	}
	s := Sample{ID: "line " + strconv.Itoa(lineNo)}
	if len(l.ID) > 0 && string(l.ID) != "null" {
		var id string
		if err := json.Unmarshal(l.ID, &id); err != nil {
			// Numeric ids are common enough to accept as written.
			var n json.Number
			if json.Unmarshal(l.ID, &n) != nil {
				return Sample{}, fmt.Errorf(`"id" must be a string or a number, have %s`, l.ID)
			}
			id = n.String()
		}
		s.ID = id
	}

	tokenForm := l.Prompt != nil || l.Continuation != nil
	textForm := l.Messages != nil || l.ContinuationText != nil
	switch {
	case tokenForm && textForm:
		return Sample{}, errors.New(`mixes the token form ("prompt", "continuation") and the text form ("messages", "continuation_text")`)
	case tokenForm:
		if l.Prompt == nil {
			return Sample{}, errors.New(`missing "prompt"`)
		}
		if l.Continuation == nil {
			return Sample{}, errors.New(`missing "continuation"`)
		}
		s.Prompt, s.Continuation = *l.Prompt, *l.Continuation
	default:
		if l.Messages == nil {
			return Sample{}, errors.New(`missing "messages"`)
		}
		if l.ContinuationText == nil {
			return Sample{}, errors.New(`missing "continuation_text"`)
		}
		if len(*l.Messages) == 0 {
			return Sample{}, errors.New(`"messages" is empty`)
		}
		for i, m := range *l.Messages {
			if m.Role == "" {
				return Sample{}, fmt.Errorf(`"messages"[%d] has no "role"`, i)
			}
		}
		if enc == nil {
			return Sample{}, ErrNoEncoder
		}
		var err error
		if s.Prompt, err = enc.EncodeChat(*l.Messages); err != nil {
			return Sample{}, fmt.Errorf("tokenizing messages: %w", err)
		}
		if s.Continuation, err = enc.Encode(*l.ContinuationText); err != nil {
			return Sample{}, fmt.Errorf("tokenizing continuation_text: %w", err)
		}
	}
	if err := checkIDs("prompt", s.Prompt); err != nil {
		return Sample{}, err
	}
	if err := checkIDs("continuation", s.Continuation); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// checkIDs requires a non-empty list of non-negative token ids. (The upper
// bound is the server's vocabulary, which the dataset does not know.)
func checkIDs(field string, ids []int) error {
	if len(ids) == 0 {
		return fmt.Errorf("%q is empty", field)
	}
	for i, id := range ids {
		if id < 0 {
			return fmt.Errorf("%q[%d] = %d is negative", field, i, id)
		}
	}
	return nil
}

// ReadDataset reads a JSON Lines dataset. Blank lines are skipped; limit > 0
// stops after that many samples. The first bad line ends the read with a
// *LineError naming it.
func ReadDataset(r io.Reader, enc TextEncoder, limit int) ([]Sample, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var samples []Sample
	for lineNo := 1; limit <= 0 || len(samples) < limit; lineNo++ {
		data, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if t := bytes.TrimSpace(data); len(t) > 0 {
			s, perr := ParseLine(t, lineNo, enc)
			if perr != nil {
				return nil, &LineError{Line: lineNo, Err: perr}
			}
			samples = append(samples, s)
		}
		if err == io.EOF {
			break
		}
	}
	return samples, nil
}

// LoadDataset reads the dataset file at path (see ReadDataset). An empty
// dataset is an error.
func LoadDataset(path string, enc TextEncoder, limit int) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := ReadDataset(f, enc, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	return samples, nil
}

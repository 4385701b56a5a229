package eval

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeEncoder tokenizes one id per byte (the byte value); EncodeChat puts
// 1000+len(role) before each message's content. Text "fail" is an error.
type fakeEncoder struct{}

func (fakeEncoder) Encode(text string) ([]int, error) {
	if text == "fail" {
		return nil, errors.New("cannot encode")
	}
	ids := make([]int, len(text))
	for i := range len(text) {
		ids[i] = int(text[i])
	}
	return ids, nil
}

func (e fakeEncoder) EncodeChat(msgs []Message) ([]int, error) {
	var ids []int
	for _, m := range msgs {
		c, err := e.Encode(m.Content)
		if err != nil {
			return nil, err
		}
		ids = append(append(ids, 1000+len(m.Role)), c...)
	}
	return ids, nil
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		enc     TextEncoder
		want    Sample
		wantErr string // substring of the error; "" = no error
	}{
		{"token form", `{"id":"a","prompt":[1,2],"continuation":[3]}`, nil,
			Sample{ID: "a", Prompt: []int{1, 2}, Continuation: []int{3}}, ""},
		{"numeric id", `{"id":17,"prompt":[1],"continuation":[3]}`, nil,
			Sample{ID: "17", Prompt: []int{1}, Continuation: []int{3}}, ""},
		{"no id names the line", `{"prompt":[1],"continuation":[3],"extra":{"x":1}}`, nil,
			Sample{ID: "line 5", Prompt: []int{1}, Continuation: []int{3}}, ""},
		{"text form", `{"id":"t","messages":[{"role":"user","content":"hi"}],"continuation_text":"yo"}`, fakeEncoder{},
			Sample{ID: "t", Prompt: []int{1004, 'h', 'i'}, Continuation: []int{'y', 'o'}}, ""},
		{"text form without tokenizer", `{"messages":[{"role":"user","content":"hi"}],"continuation_text":"yo"}`, nil,
			Sample{}, "needs a tokenizer"},
		{"tokenizer error", `{"messages":[{"role":"user","content":"fail"}],"continuation_text":"yo"}`, fakeEncoder{},
			Sample{}, "tokenizing messages: cannot encode"},
		{"empty continuation_text", `{"messages":[{"role":"user","content":"a"}],"continuation_text":""}`, fakeEncoder{},
			Sample{}, `"continuation" is empty`},
		{"no messages", `{"messages":[],"continuation_text":"yo"}`, fakeEncoder{}, Sample{}, `"messages" is empty`},
		{"message without role", `{"messages":[{"content":"x"}],"continuation_text":"yo"}`, fakeEncoder{}, Sample{}, `"messages"[0] has no "role"`},
		{"missing continuation_text", `{"messages":[{"role":"u","content":"x"}]}`, fakeEncoder{}, Sample{}, `missing "continuation_text"`},
		{"invalid JSON", `{"prompt":[1,2`, nil, Sample{}, "invalid JSON"},
		{"two values", `{"prompt":[1],"continuation":[2]} {}`, nil, Sample{}, "more than one JSON value"},
		{"not an object", `[1,2,3]`, nil, Sample{}, "invalid JSON"},
		{"null", `null`, nil, Sample{}, `want an object`},
		{"empty object", `{}`, nil, Sample{}, `want an object`},
		{"missing prompt", `{"continuation":[1]}`, nil, Sample{}, `missing "prompt"`},
		{"missing continuation", `{"prompt":[1]}`, nil, Sample{}, `missing "continuation"`},
		{"null prompt", `{"prompt":null,"continuation":[1]}`, nil, Sample{}, `missing "prompt"`},
		{"empty prompt", `{"prompt":[],"continuation":[1]}`, nil, Sample{}, `"prompt" is empty`},
		{"empty continuation", `{"prompt":[1],"continuation":[]}`, nil, Sample{}, `"continuation" is empty`},
		{"negative id", `{"prompt":[1,-2],"continuation":[1]}`, nil, Sample{}, `"prompt"[1] = -2 is negative`},
		{"fractional id", `{"prompt":[1.5],"continuation":[1]}`, nil, Sample{}, "invalid JSON"},
		{"string id in list", `{"prompt":["1"],"continuation":[1]}`, nil, Sample{}, "invalid JSON"},
		{"mixed forms", `{"prompt":[1],"continuation":[1],"continuation_text":"x"}`, fakeEncoder{}, Sample{}, "mixes the token form"},
		{"bad id type", `{"id":[1],"prompt":[1],"continuation":[1]}`, nil, Sample{}, `"id" must be a string or a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			have, err := ParseLine([]byte(tt.line), 5, tt.enc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("have error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("have error %v; want none", err)
			}
			if !reflect.DeepEqual(have, tt.want) {
				t.Errorf("have %+v; want %+v", have, tt.want)
			}
		})
	}
}

func TestReadDataset(t *testing.T) {
	good := `{"id":"a","prompt":[1],"continuation":[2]}`
	tests := []struct {
		name    string
		data    string
		limit   int
		wantIDs []string
		errLine int // 0 = no error
	}{
		{"blank lines and CRLF", "\n" + good + "\r\n\n  \n" + `{"id":"b","prompt":[1],"continuation":[2]}`, 0, []string{"a", "b"}, 0},
		{"no final newline", good, 0, []string{"a"}, 0},
		{"limit", good + "\n" + good + "\n" + good + "\n", 2, []string{"a", "a"}, 0},
		{"limit stops before a bad line", good + "\n{bad\n", 1, []string{"a"}, 0},
		{"bad line 3", good + "\n\n{bad\n" + good, 0, nil, 3},
		{"text without tokenizer on line 2", good + "\n" + `{"messages":[{"role":"u","content":"x"}],"continuation_text":"y"}`, 0, nil, 2},
		{"empty", "", 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			samples, err := ReadDataset(strings.NewReader(tt.data), nil, tt.limit)
			if tt.errLine != 0 {
				var le *LineError
				if !errors.As(err, &le) || le.Line != tt.errLine {
					t.Fatalf("have error %v; want a LineError on line %d", err, tt.errLine)
				}
				if !strings.HasPrefix(err.Error(), "line ") {
					t.Errorf("have message %q; want it to start with the line", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, s := range samples {
				ids = append(ids, s.ID)
			}
			if !reflect.DeepEqual(ids, tt.wantIDs) {
				t.Errorf("have ids %v; want %v", ids, tt.wantIDs)
			}
		})
	}

	t.Run("text form needs a tokenizer", func(t *testing.T) {
		_, err := ReadDataset(strings.NewReader(`{"messages":[{"role":"u","content":"x"}],"continuation_text":"y"}`), nil, 0)
		if !errors.Is(err, ErrNoEncoder) {
			t.Errorf("have %v; want ErrNoEncoder", err)
		}
	})
	t.Run("long line", func(t *testing.T) {
		ids := strings.Repeat("151643,", 200000) + "1"
		line := `{"prompt":[` + ids + `],"continuation":[1]}`
		samples, err := ReadDataset(strings.NewReader(line), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if have := len(samples[0].Prompt); have != 200001 {
			t.Errorf("have %d prompt tokens; want 200001", have)
		}
	})
}

func TestLoadDataset(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte("\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDataset(empty, nil, 0); err == nil || !strings.Contains(err.Error(), "no samples") {
		t.Errorf("empty file: have %v; want a no-samples error", err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"prompt":[1],"continuation":[-1]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDataset(bad, nil, 0)
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl: line 1:") {
		t.Errorf("bad file: have %v; want the path and line", err)
	}
	if _, err := LoadDataset(filepath.Join(dir, "missing.jsonl"), nil, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: have %v; want ErrNotExist", err)
	}
}

// FuzzParseLine checks that no line panics the parser and that whatever it
// accepts is usable by the replay.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","prompt":[1,2],"continuation":[3]}`,
		`{"id":3,"prompt":[0],"continuation":[151643]}`,
		`{"messages":[{"role":"user","content":"hé"}],"continuation_text":"ok"}`,
		`{"prompt":[1e3],"continuation":[1]}`,
		`{"prompt":[-1],"continuation":[1]}`,
		`{"prompt":[99999999999999999999],"continuation":[1]}`,
		`null`, `[]`, `{}`, `{"id":null,"prompt":[1],"continuation":[1]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		s, err := ParseLine(line, 1, fakeEncoder{})
		if err != nil {
			if s.ID != "" || s.Prompt != nil || s.Continuation != nil {
				t.Errorf("error %v with a non-zero sample %+v", err, s)
			}
			return
		}
		if len(s.Prompt) == 0 || len(s.Continuation) == 0 {
			t.Errorf("accepted an empty prompt or continuation: %+v", s)
		}
		for _, id := range append(append([]int{}, s.Prompt...), s.Continuation...) {
			if id < 0 {
				t.Errorf("accepted a negative id: %+v", s)
			}
		}
		// ReadDataset must agree with ParseLine on a one-line file.
		if !strings.ContainsAny(string(line), "\n") {
			got, err := ReadDataset(strings.NewReader(string(line)), fakeEncoder{}, 0)
			if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], s) {
				t.Errorf("ReadDataset: have %+v, %v; want [%+v]", got, err, s)
			}
		}
	})
}

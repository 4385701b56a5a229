// This file draws throughput against concurrency (gonum/plot) from the JSON
// reports of `draftd bench` and `draftd eval`: one line per series, draft
// tokens/s on the y axis, the reports' concurrency on a log₂ x axis. It
// plots only what the reports measured; it runs nothing.

package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// CurvePoint is one measured run: the concurrency it ran at and the draft
// tokens per second it measured.
type CurvePoint struct {
	Concurrency     int
	DraftTokensPerS float64
	File            string // the report it came from
}

// CurveSeries is the runs of one server or configuration.
type CurveSeries struct {
	Label  string
	Points []CurvePoint
}

// ErrNotAReport is wrapped by the error for a file that is not a report of
// `draftd bench --json` or `draftd eval --json`.
var ErrNotAReport = errors.New("not a draftd bench or eval report")

// ReadCurvePoint reads the concurrency, draft tokens/s and backend of one
// JSON report (bench or eval).
func ReadCurvePoint(path string) (p CurvePoint, backend string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return p, "", err
	}
	var r struct {
		Backend         string   `json:"backend"`
		Concurrency     *int     `json:"concurrency"`
		DraftTokensPerS *float64 `json:"draft_tokens_per_s"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return p, "", fmt.Errorf("%s: %w: %v", path, ErrNotAReport, err)
	}
	switch {
	case r.Concurrency == nil || r.DraftTokensPerS == nil:
		return p, "", fmt.Errorf(`%s: %w: no "concurrency" or "draft_tokens_per_s"`, path, ErrNotAReport)
	case *r.Concurrency < 1:
		return p, "", fmt.Errorf("%s: concurrency %d; want ≥ 1", path, *r.Concurrency)
	case math.IsNaN(*r.DraftTokensPerS) || math.IsInf(*r.DraftTokensPerS, 0) || *r.DraftTokensPerS < 0:
		return p, "", fmt.Errorf("%s: draft_tokens_per_s %v; want a finite number ≥ 0", path, *r.DraftTokensPerS)
	}
	if r.Backend == "" {
		r.Backend = BackendDraftd
	}
	return CurvePoint{Concurrency: *r.Concurrency, DraftTokensPerS: *r.DraftTokensPerS, File: path}, r.Backend, nil
}

// WriteCurvePlot draws the series to path; the extension picks the format
// (.png, .svg, .pdf). Points are joined in order of concurrency; two runs
// at the same concurrency in one series are an error (which one would the
// line go through?).
func WriteCurvePlot(series []CurveSeries, title, path string) (err error) {
	if len(series) == 0 {
		return errors.New("nothing to plot: no reports")
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format == "" {
		return fmt.Errorf("--out %s: no file extension to choose the format (.png, .svg, .pdf)", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrency (conversations in flight)"
	p.Y.Label.Text = "draft tokens/s"
	p.X.Scale = plot.LogScale{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0

	var xs []int
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	for i, s := range series {
		pts := slices.Clone(s.Points)
		if len(pts) == 0 {
			return fmt.Errorf("series %q has no points", s.Label)
		}
		slices.SortFunc(pts, func(a, b CurvePoint) int { return a.Concurrency - b.Concurrency })
		xy := make(plotter.XYs, len(pts))
		for j, pt := range pts {
			if j > 0 && pts[j-1].Concurrency == pt.Concurrency {
				return fmt.Errorf("series %q: two reports at concurrency %d (%s, %s)", s.Label, pt.Concurrency, pts[j-1].File, pt.File)
			}
			xy[j] = plotter.XY{X: float64(pt.Concurrency), Y: pt.DraftTokensPerS}
			if !slices.Contains(xs, pt.Concurrency) {
				xs = append(xs, pt.Concurrency)
			}
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("series %q: %w", s.Label, err)
		}
		c := colors[i%len(colors)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(s.Label, line, points)
	}
	slices.Sort(xs)
	p.X.Tick.Marker = valueTicks(xs)
	if len(xs) == 1 { // a log axis needs a range
		p.X.Min, p.X.Max = float64(xs[0])/2, float64(xs[0])*2
	}
	p.Add(plotter.NewGrid())

	w, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = w.WriteTo(f)
	return err
}

// valueTicks labels the x axis at the measured concurrencies only.
type valueTicks []int

func (v valueTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, x := range v {
		if f := float64(x); f >= min && f <= max {
			ts = append(ts, plot.Tick{Value: f, Label: strconv.Itoa(x)})
		}
	}
	return ts
}

// This file draws a Report as a figure (gonum/plot): the accepted-length
// histogram above the acceptance rate by draft position. It computes nothing.

package eval

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WritePlot writes the figure of r to path; the extension picks the format
// (.png, .svg, .pdf, .jpg, .eps, .tif).
func WritePlot(r *Report, path string) (err error) {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format == "" {
		return fmt.Errorf("--plot %s: no file extension to choose the format (.png, .svg, .pdf)", path)
	}
	const width, height = 9 * vg.Inch, 8 * vg.Inch
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}

	hist := make(plotter.Values, len(r.AcceptHist))
	names := make([]string, len(r.AcceptHist))
	for a, n := range r.AcceptHist {
		hist[a] = float64(n)
		names[a] = strconv.Itoa(a)
	}
	top, err := barPlot(hist, names, width, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff})
	if err != nil {
		return err
	}
	top.Title.Text = fmt.Sprintf("accepted draft tokens per step (τ = %.3f, %d steps, %d failures)", r.Tau, r.Steps, r.Failures)
	top.X.Label.Text = "accepted length"
	top.Y.Label.Text = "steps"

	rates := plotter.Values(r.AcceptByPosition)
	pos := make([]string, len(rates))
	for i := range pos {
		pos[i] = strconv.Itoa(i + 1)
	}
	bottom, err := barPlot(rates, pos, width, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff})
	if err != nil {
		return err
	}
	bottom.Title.Text = "acceptance rate by draft position (accepted / drafts with a token there)"
	bottom.X.Label.Text = "draft position"
	bottom.Y.Label.Text = "rate"
	bottom.Y.Min, bottom.Y.Max = 0, 1

	plots := [][]*plot.Plot{{top}, {bottom}}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, draw.New(c))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = c.WriteTo(f)
	return err
}

// barPlot is one bar per value, labeled by names.
func barPlot(vs plotter.Values, names []string, width vg.Length, fill color.Color) (*plot.Plot, error) {
	p := plot.New()
	if len(vs) == 0 {
		return p, nil
	}
	bars, err := plotter.NewBarChart(vs, width/vg.Length(len(vs)+2)*0.6)
	if err != nil {
		return nil, err
	}
	bars.Color = fill
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}

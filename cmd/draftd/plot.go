// draftd plot: draft tokens/s against concurrency from the JSON reports of
// `draftd bench --json` and `draftd eval --json` (one report per
// concurrency), one line per server kind or label, as a PNG, SVG or PDF. It
// measures nothing: every point is a report someone measured.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/draftd/draftd/internal/eval"
)

func init() {
	register("plot", "draft tokens/s against concurrency from bench/eval JSON reports (PNG, SVG, PDF)", runPlot)
}

const plotDoc = `Each REPORT is a file written by draftd bench --json or draftd eval --json; its
"concurrency" is the x value and its "draft_tokens_per_s" the y value. Reports
are grouped into one line per "backend" (draftd, llama-server), or per LABEL
when given as LABEL=REPORT.json.`

func runPlot(ctx context.Context, args []string) error {
	fs := newFlags("plot", "plot --out FILE.png [--title T] REPORT.json|LABEL=REPORT.json ...", plotDoc)
	out := fs.String("out", "", "the figure to write: .png, .svg or .pdf (required)")
	title := fs.String("title", "draft tokens/s against concurrency", "the figure's title (say the model, machine and date)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if *out == "" {
		return clientUsageError(fs, "--out is required")
	}
	if fs.NArg() == 0 {
		return clientUsageError(fs, "no reports given")
	}
	var series []eval.CurveSeries
	index := map[string]int{}
	for _, arg := range fs.Args() {
		label, path := "", arg
		if l, p, ok := strings.Cut(arg, "="); ok && !strings.HasSuffix(l, "/") {
			if l == "" || p == "" {
				return clientUsageError(fs, fmt.Sprintf("%q: want REPORT.json or LABEL=REPORT.json", arg))
			}
			label, path = l, p
		}
		pt, backend, err := eval.ReadCurvePoint(path)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		if label == "" {
			label = backend
		}
		i, ok := index[label]
		if !ok {
			i = len(series)
			index[label] = i
			series = append(series, eval.CurveSeries{Label: label})
		}
		series[i].Points = append(series[i].Points, pt)
	}
	if err := eval.WriteCurvePlot(series, *title, *out); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

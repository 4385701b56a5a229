// draftd info: what a model file is — architecture, sizes, tensor types and
// parameter count — without running it.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/draftd/draftd/internal/model"
)

func init() {
	register("info", "architecture, sizes and tensor types of a model", runInfo)
}

func runInfo(ctx context.Context, args []string) error {
	fs := newFlags("info", "info --model PATH", "")
	path := fs.String("model", "", "model: a .gguf file or an HF directory (required)")
	if stop, err := parseClientFlags(fs, args); stop {
		return err
	}
	if *path == "" {
		return clientUsageError(fs, "--model is required")
	}
	var m *model.Model
	err := interruptible(ctx, func() (err error) {
		m, err = model.Load(*path, model.Options{})
		return err
	})
	if err != nil {
		return fmt.Errorf("info: %w", err)
	}
	defer m.Close()
	c := m.Config
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "path\t%s\n", m.Path())
	fmt.Fprintf(w, "architecture\t%s\n", c.Arch)
	fmt.Fprintf(w, "layers\t%d\n", c.Layers)
	fmt.Fprintf(w, "hidden\t%d\n", c.Hidden)
	fmt.Fprintf(w, "intermediate\t%d\n", c.Intermediate)
	fmt.Fprintf(w, "heads\t%d (kv %d, head_dim %d)\n", c.Heads, c.KVHeads, c.HeadDim)
	fmt.Fprintf(w, "vocab\t%d\n", c.Vocab)
	fmt.Fprintf(w, "max context\t%d\n", c.MaxContext)
	fmt.Fprintf(w, "rope theta\t%g\n", c.RopeTheta)
	fmt.Fprintf(w, "rms eps\t%g\n", c.RMSEps)
	fmt.Fprintf(w, "tied embeddings\t%v\n", c.TiedEmbed)
	fmt.Fprintf(w, "q/k norm\t%v\n", c.QKNorm)
	fmt.Fprintf(w, "q/k/v bias\t%v\n", c.QKVBias)
	fmt.Fprintf(w, "parameters\t%d (%.3fB)\n", m.Params, float64(m.Params)/1e9)
	fmt.Fprintf(w, "weight bytes\t%d (%.1f MiB)\n", m.WeightBytes, float64(m.WeightBytes)/(1<<20))
	types := make([]string, 0, len(m.TypeCounts))
	for t := range m.TypeCounts {
		types = append(types, t)
	}
	sort.Strings(types)
	mix := m.Mix()
	for _, t := range types {
		fmt.Fprintf(w, "tensors %s\t%d (%d parameters, %.4g bits/weight)\n", t, m.TypeCounts[t], mix[t].Params, mix[t].BitsPerWeight)
	}
	fmt.Fprintf(w, "bits per weight\t%.4g\n", m.BitsPerWeight())
	if err := w.Flush(); err != nil {
		return err
	}
	// Every tensor, with its file name (llama.cpp's for GGUF files).
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "tensor\ttype\tparameters\tbits/weight")
	gguf := !isDir(*path)
	for _, t := range m.Tensors {
		name := t.Name
		if gguf {
			name = model.GGUFName(name)
		}
		fmt.Fprintf(w, "%s\t%v\t%d\t%.4g\n", name, t.Type, t.Params, 8*float64(t.Bytes)/float64(t.Params))
	}
	return w.Flush()
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

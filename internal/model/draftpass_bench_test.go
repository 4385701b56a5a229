package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/draftd/draftd/internal/cputime"
	"github.com/draftd/draftd/internal/kernels"
)

// BenchmarkDraftPass is one batch-1 decode step of the real drafter
// ($DRAFTD_REAL_MODELS/qwen2.5-coder-0.5b-instruct.gguf, default
// ~/.cache/draftd/real; $DRAFTD_BENCH_MODEL overrides the file) after 256
// positions, and its parts, each run alone on the model's own pool
// (DRAFTD_BENCH_THREADS, default 2):
//
//	step          the whole Forward; MB = the layer matrices and the head
//	matmul/TYPE   every layer matrix of that weight type (one MatMul each,
//	              the input row of the step's width); wGB/s = its bytes / time
//	head          the LM-head argmax
//	attention     every layer's attention over the context (f16 KV)
//	rest          norms, QKV biases, RoPE and KV store, SiLU·mul, residuals of
//	              every layer, and the final norm (one thread, as at B = 1)
//	barrier       one empty pool loop; barriers/step is how many loops a
//	              step runs (one per matmul and per attention), so
//	              barrier-ms/step is their hand-off cost
//
// cpu-ms/op is process CPU time (both threads): steadier than ms/op on a
// shared host.
func BenchmarkDraftPass(b *testing.B) {
	path := os.Getenv("DRAFTD_BENCH_MODEL")
	if path == "" {
		dir := os.Getenv("DRAFTD_REAL_MODELS")
		if dir == "" {
			home, _ := os.UserHomeDir()
			dir = filepath.Join(home, ".cache", "draftd", "real")
		}
		path = filepath.Join(dir, "qwen2.5-coder-0.5b-instruct.gguf")
	}
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no real drafter: %v", err)
	}
	threads := 2
	if s := os.Getenv("DRAFTD_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("DRAFTD_BENCH_THREADS=%q: want a positive integer", s)
		}
		threads = n
	}
	m, err := Load(path, Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const ctxLen = 256
	r := rand.New(rand.NewPCG(1, 2))
	var bs []*Block
	for range (ctxLen + 1 + BlockSize - 1) / BlockSize {
		bs = append(bs, m.NewBlock())
	}
	toks := make([]int, ctxLen)
	for j := range toks {
		toks[j] = r.IntN(m.Vocab)
	}
	s := &Seq{Tokens: toks, Blocks: bs}
	if err := m.Forward([]*Seq{s}); err != nil { // prefill
		b.Fatal(err)
	}
	s.Tokens, s.Pos = []int{s.Next}, ctxLen
	seqs := []*Seq{s}
	if err := m.Forward(seqs); err != nil { // leaves the scratch sized for one token
		b.Fatal(err)
	}
	s.Tokens = []int{s.Next}

	run := func(name string, bytes int64, fn func()) {
		b.Run(name, func(b *testing.B) {
			fn()
			cpu0 := cputime.Process()
			for b.Loop() {
				fn()
			}
			cpu := cputime.Process() - cpu0
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
			if bytes > 0 {
				b.ReportMetric(float64(bytes)/sec/1e9, "wGB/s")
				b.ReportMetric(float64(bytes)/1e6, "MB")
			}
		})
	}

	// What a step streams: every layer matrix and the head, not the
	// embedding (one row of it).
	streamed := int64(m.Output.Bytes())
	for li := range m.Layer {
		l := &m.Layer[li]
		for _, w := range []*kernels.Matrix{l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down} {
			streamed += int64(w.Bytes())
		}
	}
	run("step", streamed, func() {
		if err := m.Forward(seqs); err != nil {
			b.Fatal(err)
		}
	})

	// Every matrix of the step in the step's order (one activation
	// quantization for Q, K, V and one for gate, up, as Forward) and the
	// head, nothing else: the step less this is what the rest of a step
	// (attention, norms, the serial per-token work) costs in place.
	xs := make([]float32, max(m.Hidden, m.Intermediate, m.QDim()))
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	q, k, v := make([]float32, m.QDim()), make([]float32, m.KVHeads*m.HeadDim), make([]float32, m.KVHeads*m.HeadDim)
	ys, gate, up := make([]float32, m.Hidden), make([]float32, m.Intermediate), make([]float32, m.Intermediate)
	stepIDs := make([]int, 1)
	qkvY, guY := [3][]float32{q, k, v}, [2][]float32{gate, up}
	run("matmuls", streamed, func() {
		for li := range m.Layer {
			l := &m.Layer[li]
			qkvW, guW := [3]*kernels.Matrix{l.Q, l.K, l.V}, [2]*kernels.Matrix{l.Gate, l.Up}
			kernels.MatMuls(m.pool, qkvY[:], qkvW[:], xs[:m.Hidden], 1)
			kernels.MatMul(m.pool, ys, l.O, xs[:m.QDim()], 1)
			kernels.MatMuls(m.pool, guY[:], guW[:], xs[:m.Hidden], 1)
			kernels.MatMul(m.pool, ys, l.Down, xs[:m.Intermediate], 1)
		}
		kernels.MatMulArgmax(m.pool, stepIDs, m.Output, xs[:m.Hidden], 1)
	})

	// Layer matrices by type (and with DRAFTD_BENCH_ROLES=1 by type and
	// role), each with an input of its width.
	split := os.Getenv("DRAFTD_BENCH_ROLES") != ""
	byType := map[string][]*kernels.Matrix{}
	for li := range m.Layer {
		l := &m.Layer[li]
		for i, w := range []*kernels.Matrix{l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down} {
			t := w.Type.String()
			byType[t] = append(byType[t], w)
			if split {
				t += "/" + [...]string{"q", "k", "v", "o", "gate", "up", "down"}[i]
				byType[t] = append(byType[t], w)
			}
		}
	}
	types := make([]string, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Strings(types)
	x := make([]float32, max(m.Hidden, m.Intermediate, m.QDim()))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, max(m.Hidden, m.Intermediate, m.QDim()))
	for _, t := range types {
		ws := byType[t]
		var bytes int64
		for _, w := range ws {
			bytes += int64(w.Bytes())
		}
		run(fmt.Sprintf("matmul/%s/n=%d", t, len(ws)), bytes, func() {
			for _, w := range ws {
				kernels.MatMul(m.pool, y, w, x, 1)
			}
		})
	}
	ids := make([]int, 1)
	run("head", int64(m.Output.Bytes()), func() {
		kernels.MatMulArgmax(m.pool, ids, m.Output, x[:m.Hidden], 1)
	})

	scale := float32(1 / math.Sqrt(float64(m.HeadDim)))
	m.planAttention(seqs)
	run("attention", 0, func() {
		for li := range m.Layer {
			m.attention(li, seqs, scale, m.sc.ap.tasks)
		}
	})
	sc := &m.sc
	gate0 := append([]float32(nil), sc.gate...)
	run("rest", 0, func() {
		for li := range m.Layer {
			l := &m.Layer[li]
			m.rmsNormRows(sc.xb, sc.x, l.AttnNorm, 1)
			m.prepQKV(li, seqs, 1)
			m.addRows(sc.x, sc.xb, 1)
			m.rmsNormRows(sc.xb, sc.x, l.FFNNorm, 1)
			copy(sc.gate, gate0) // silu·mul in place again and again would decay to denormals
			m.siluMulRows(sc.gate, sc.up, 1)
			m.addRows(sc.x, sc.xb, 1)
			// keep the activations bounded across iterations
			kernels.RMSNorm(sc.x[:m.Hidden], sc.x[:m.Hidden], l.AttnNorm, m.RMSEps)
		}
	})
	run("barrier", 0, func() {
		m.pool.For(m.pool.Threads(), 1, func(lo, hi int) {})
	})
	b.Logf("barriers/step: %d (one per layer matrix and per layer's attention, and the head)", 8*len(m.Layer)+1)
}

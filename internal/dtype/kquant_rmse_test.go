package dtype

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestRMSEAgainstGGML compares the RMSE of the Q4_K/Q5_K/Q6_K encoders with
// that of ggml's reference quantizers on the same inputs. It runs only with
// DRAFTD_RMSE_INPUT (3 matrices of 2048×6144 f32: Gaussian, Laplace,
// Gaussian with 0.1 % outliers ×12) and DRAFTD_RMSE_GGML (lines
// "DIST TYPE rmse VALUE" from a program linked with ggml-quants.c; see
// docs/development.md, "Quantizer RMSE against ggml"), which cannot be
// built in CI (no network).
func TestRMSEAgainstGGML(t *testing.T) {
	in, ref := os.Getenv("DRAFTD_RMSE_INPUT"), os.Getenv("DRAFTD_RMSE_GGML")
	if in == "" || ref == "" {
		t.Skip("set DRAFTD_RMSE_INPUT and DRAFTD_RMSE_GGML")
	}
	raw, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols = 2048, 6144
	if len(raw) != 3*rows*cols*4 {
		t.Fatalf("%s: %d bytes; want %d", in, len(raw), 3*rows*cols*4)
	}
	want := map[string]float64{}
	f, err := os.Open(ref)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[2] == "rmse" {
			v, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", ref, sc.Text(), err)
			}
			want[f[0]+" "+f[1]] = v
		}
	}
	for d, dist := range []string{"gauss", "laplace", "outliers"} {
		x := make([]float32, rows*cols)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(d*rows*cols+i):]))
		}
		for _, typ := range []Type{Q4_K, Q5_K, Q6_K} {
			have := rmse(t, typ, x)
			w, ok := want[dist+" "+typ.String()]
			if !ok {
				t.Fatalf("%s: no %s %v line", ref, dist, typ)
			}
			t.Logf("%-8s %v: RMSE %.6e, ggml %.6e, ratio %.4f", dist, typ, have, w, have/w)
			if !(have <= 1.02*w) {
				t.Errorf("%s %v: RMSE %.6e > 1.02 × ggml's %.6e", dist, typ, have, w)
			}
		}
	}
}

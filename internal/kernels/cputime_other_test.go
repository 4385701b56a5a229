//go:build !unix

package kernels

import "time"

// ProcessCPU is not measured on this system (benchmarks skip their CPU metric).
func ProcessCPU() time.Duration { return 0 }

//go:build !unix

// Process CPU time where getrusage is not available: not measured.

package kernels

import "time"

// ProcessCPU is not measured on this system (benchmarks skip their CPU metric).
func ProcessCPU() time.Duration { return 0 }

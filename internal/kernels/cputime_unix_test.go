//go:build unix

// Process CPU time for benchmarks on Unix; not a timer for tests.

package kernels

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time (user + system) this process has used, for
// benchmarks that report the compute they cost as well as the wall time
// (on a shared machine the wall time also counts waiting for a core).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

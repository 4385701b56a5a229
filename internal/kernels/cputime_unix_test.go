//go:build unix

package kernels

import (
	"syscall"
	"time"
)

// processCPU is the user+system CPU time of the process so far: on a shared
// host, work per CPU-second is steadier than work per wall second.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

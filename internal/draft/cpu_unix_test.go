//go:build unix

package draft

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user + system), so that a
// benchmark on a shared host can report what it cost, not how long it
// waited for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

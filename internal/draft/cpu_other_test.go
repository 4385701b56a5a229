//go:build !unix

package draft

import "time"

func cpuTime() time.Duration { return 0 }

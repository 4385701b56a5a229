// Sizing the default KV budget from the machine's free memory. Linux-only
// source (/proc/meminfo) with a fixed fallback elsewhere; not a general
// memory monitor.
package engine

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// DefaultKVCacheBytes is the KV budget used when Options.KVCacheBytes is 0:
// a quarter of MemAvailable from /proc/meminfo, clamped to [64 MiB, 8 GiB];
// 1 GiB when /proc/meminfo cannot be read.
func DefaultKVCacheBytes() int64 {
	const (
		lo       = 64 << 20
		hi       = 8 << 30
		fallback = 1 << 30
	)
	avail, ok := memAvailable("/proc/meminfo")
	if !ok {
		return fallback
	}
	return min(max(avail/4, lo), hi)
}

// memAvailable reads the MemAvailable line (in kB) of a meminfo file.
func memAvailable(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// Package cputime reads the CPU time the process has used, for benchmarks
// on shared hosts: work per CPU-second is steadier than work per wall
// second when other jobs take turns on the cores. It is not a profiler and
// not a clock for timeouts.
package cputime

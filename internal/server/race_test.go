//go:build race

// Marks a -race build so the tests shrink their workloads; nothing else.
package server

func init() { raceEnabled = true }

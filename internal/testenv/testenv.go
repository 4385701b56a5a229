// Package testenv is the test suite's strictness switch, read the same way
// in Go, Python (draftd._testing) and bash (scripts/realtau): with
// DRAFTD_STRICT=1 a test that lacks what it needs (a model file, an npm
// package, numpy) fails instead of skipping. scripts/test exports
// DRAFTD_STRICT=1; docs/development.md#strictness states the rule.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// Var is the switch's environment variable.
const Var = "DRAFTD_STRICT"

// Strict reads the switch: DRAFTD_STRICT=1 is strict, 0 is not; unset or
// empty, the suite is strict when CI is set to anything but "", "0" or
// "false" (CI services set CI=true). Any other DRAFTD_STRICT value is an
// error naming it.
func Strict() (bool, error) {
	switch v := os.Getenv(Var); v {
	case "1":
		return true, nil
	case "0":
		return false, nil
	case "":
		switch os.Getenv("CI") {
		case "", "0", "false":
			return false, nil
		}
		return true, nil
	default:
		return false, fmt.Errorf("%s=%q: want 1 (missing prerequisites fail), 0 (they skip) or unset", Var, v)
	}
}

// Skip skips tb with the message, or fails it when the suite is strict
// (and when the switch holds a value it does not know).
func Skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	strict, err := Strict()
	if err != nil {
		tb.Fatalf("%s (and: %v)", msg, err)
	}
	if strict {
		tb.Fatalf("%s (%s: a missing prerequisite is a failure)", msg, describe())
	}
	tb.Skip(msg)
}

func describe() string {
	if v := os.Getenv(Var); v != "" {
		return Var + "=" + v
	}
	return "CI=" + os.Getenv("CI")
}

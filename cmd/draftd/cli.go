// The command-line convention every subcommand follows, in one place:
//   - a usage error (unknown or bad flag, missing or out-of-range value,
//     stray argument) prints "draftd CMD: what was wrong", the synopsis and
//     the flags on stderr, and exits 2;
//   - -h prints the same synopsis and flags and exits 0;
//   - a runtime error exits 1 with one line "draftd: CMD: ..." naming the
//     file or flag it concerns;
//   - SIGINT/SIGTERM/SIGHUP cancel the command's context (main.go): every
//     command stops at once (serve: gracefully), and a second signal exits
//     immediately.
//
// It holds helpers only; each command's flags live in its own file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/draftd/draftd/internal/model"
)

// newFlags returns the flag set of command name; its usage prints
// "usage: draftd SYNOPSIS", doc (if any) and the flags.
func newFlags(name, synopsis, doc string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: draftd %s\n", synopsis)
		if doc != "" {
			fmt.Fprintf(fs.Output(), "\n%s\n", doc)
		}
		fmt.Fprintln(fs.Output(), "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseClientFlags parses args into fs and says whether the command should stop
// now, with err to return: nil after -h printed the usage, an ErrUsage for a
// bad flag (already reported by fs) or a stray argument.
func parseClientFlags(fs *flag.FlagSet, args []string) (stop bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return true, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return true, clientUsageError(fs, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	return false, nil
}

// clientUsageError prints msg and the flags of fs, and returns an ErrUsage.
func clientUsageError(fs *flag.FlagSet, msg string) error {
	fmt.Fprintf(fs.Output(), "draftd %s: %s\n", fs.Name(), msg)
	fs.Usage()
	return fmt.Errorf("%w: %s", ErrUsage, msg)
}

// errInterrupted: the command's context ended (a signal) before it finished.
var errInterrupted = errors.New("interrupted")

// interruptible runs f, which does not watch ctx (loading or writing a
// model), and returns errInterrupted as soon as ctx ends; f then runs on
// until the process exits.
func interruptible(ctx context.Context, f func() error) error {
	if err := ctx.Err(); err != nil {
		return errInterrupted
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return errInterrupted
	}
}

// kvTypeFlag registers --kv-type and its alias --kv-f32 on fs; the
// returned function, called after parsing, gives the chosen cache type or
// the usage message for a bad value or a contradiction.
func kvTypeFlag(fs *flag.FlagSet) func() (model.KVType, string) {
	kvType := fs.String("kv-type", model.KVF16.String(), "KV cache storage type: f16, q8_0 (ggml block_q8_0 per 32 elements, half the memory) or f32")
	kvF32 := fs.Bool("kv-f32", false, "the same as --kv-type f32 (kept for existing scripts)")
	return func() (model.KVType, string) {
		t, err := model.ParseKVType(*kvType)
		if err != nil {
			return 0, fmt.Sprintf("--kv-type %q: want f16, q8_0 or f32", *kvType)
		}
		if *kvF32 {
			set := false // --kv-type given: even f16, its default, contradicts
			fs.Visit(func(f *flag.Flag) { set = set || f.Name == "kv-type" })
			if set && t != model.KVF32 {
				return 0, fmt.Sprintf("--kv-f32 contradicts --kv-type %v", t)
			}
			t = model.KVF32
		}
		return t, ""
	}
}

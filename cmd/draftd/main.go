// Command draftd is a speculative-decoding drafter: it serves the greedy
// continuation of a small Qwen3-family model over HTTP and measures how well
// those drafts are accepted. main only wires signals to Run; every subcommand
// lives in its own file and registers itself in commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/draftd/draftd/internal/server"
)

// command is one subcommand: its one-line summary and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is filled by the init functions of the subcommand files.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	if _, dup := commands[name]; dup {
		panic("draftd: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

// ErrUsage is returned for a command line that cannot be run; main prints usage.
var ErrUsage = errors.New("usage")

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Go's HTTP transport logs through the standard logger, quoting what a
	// server sent (a hostile Hub's bytes past its Content-Length): bound it.
	log.SetOutput(server.LimitLines(os.Stderr))
	// Subscribe before anything runs: a signal that arrived before the
	// goroutine got to signal.Notify would take its default action (kill).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go onSignals(sigs, cancel)
	if err := Run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, ErrUsage) {
			os.Exit(2) // the command printed what was wrong and its synopsis
		}
		fmt.Fprintln(os.Stderr, "draftd:", err)
		os.Exit(1)
	}
}

// onSignals turns the first SIGINT, SIGTERM or SIGHUP into a cancellation
// of the command's context (serve: a graceful shutdown; SIGHUP is treated
// as SIGTERM, so that closing a terminal or a hang-up from a supervisor
// never kills the process mid-request) and the second into an immediate
// exit with status 1.
func onSignals(sigs <-chan os.Signal, cancel context.CancelFunc) {
	sig := <-sigs
	fmt.Fprintf(os.Stderr, "draftd: %v: stopping (a second signal exits at once)\n", sig)
	cancel()
	sig = <-sigs
	fmt.Fprintf(os.Stderr, "draftd: second signal (%v): exiting now\n", sig)
	os.Exit(1)
}

// Run dispatches args[0] to its subcommand.
func Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return ErrUsage
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "draftd: unknown command %q\n", args[0])
		usage()
		return ErrUsage
	}
	return c.run(ctx, args[1:])
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "usage: draftd <command> [flags]\n\ncommands:")
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'draftd <command> -h' for the flags of one command.")
}

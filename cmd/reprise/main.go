package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks errors that are the user's invocation; they exit with 2.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		// One line, as for an unknown flag.
		msg := fmt.Sprintf("reprise: unknown command %q", args[0])
		best, bestD := "", 0
		for name := range commands {
			if d := editDistance(args[0], name); best == "" || d < bestD || d == bestD && name < best {
				best, bestD = name, d
			}
		}
		if best != "" && bestD <= max(2, len(args[0])/3) {
			msg += fmt.Sprintf("; did you mean %q?", best)
		}
		fmt.Fprintln(stderr, msg+" (reprise help lists the commands)")
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		// errUsage only sets the exit status; it is not part of the message.
		fmt.Fprintf(stderr, "reprise %s: %s\n", c.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "reprise: captured accelerator graphs for LLM inference")
	fmt.Fprintln(w, "\nUsage: reprise <command> [flags]\n\nCommands:")
	names := slices.Sorted(maps.Keys(commands))
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"reprise <command> -h\" for a command's flags.")
}

// logger writes text logs to stderr at the level REPRISE_LOG asks (debug,
// info, warn, error; default info).
func logger(stderr io.Writer) *slog.Logger { return newLogger(stderr, false) }

// newLogger is logger, writing JSON lines when json is set.
func newLogger(stderr io.Writer, json bool) *slog.Logger {
	lvl := slog.LevelInfo
	if v := os.Getenv("REPRISE_LOG"); v != "" {
		_ = lvl.UnmarshalText([]byte(v))
	}
	return logHandler(stderr, lvl, json)
}

func logHandler(w io.Writer, lvl slog.Level, json bool) *slog.Logger {
	o := &slog.HandlerOptions{Level: lvl}
	if json {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

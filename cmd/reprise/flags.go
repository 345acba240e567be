package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// newFlags makes a subcommand's flag set that reports errors instead of
// exiting, so tests can drive run(). Its help lists the flags as --name
// (the way the docs and other servers' users write them; Go's flag package
// takes one dash or two alike).
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("reprise "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: reprise %s [flags]\n\nFlags:\n", name)
		printFlags(fs)
	}
	return fs
}

// flagLine is the start of a flag's entry in flag.PrintDefaults' output.
var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9-]+)`)

// printFlags is flag.PrintDefaults with two dashes before every flag name
// longer than one letter (-v and -h stay as they are).
func printFlags(fs *flag.FlagSet) {
	var b bytes.Buffer
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	io.WriteString(out, flagLine.ReplaceAllString(b.String(), "  --$1"))
}

// parse parses a subcommand's flags. -h prints its help (and returns
// flag.ErrHelp); any other mistake is one line, not the whole help: an
// unknown flag names the closest one there is.
func parse(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		return fmt.Errorf("%w: %s", errUsage, flagError(fs, err))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q (flags take --name value; %s -h lists them)", errUsage, fs.Args(), fs.Name())
	}
	return nil
}

// flagError rewrites the flag package's error for a person: --name with two
// dashes, and for an unknown flag the closest known one.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	const undefined = "flag provided but not defined: -"
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		s := fmt.Sprintf("unknown flag %s", dashes(name))
		if best := closestFlag(fs, name); best != "" {
			s += fmt.Sprintf("; did you mean %s?", dashes(best))
		}
		return s + fmt.Sprintf(" (%s -h lists the flags)", fs.Name())
	}
	// invalid value "x" for flag -name: ...
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		if fl := fs.Lookup(m[2]); fl != nil {
			return fmt.Sprintf("%s %s: %s", dashes(m[2]), quoteValue(m[1]), valueProblem(fl, m[3]))
		}
	}
	// flag needs an argument: -name
	return regexp.MustCompile(`(flag|argument:) -([a-z0-9][a-z0-9-]+)`).ReplaceAllString(msg, "$1 --$2")
}

var invalidValue = regexp.MustCompile(`^invalid (?:value|boolean value) "(.*)" for flag -([a-z0-9-]+): (.*)$`)

func quoteValue(v string) string { return fmt.Sprintf("%q", v) }

// valueProblem says what is wrong with a flag's value: the flag package's
// own reasons ("parse error", "value out of range") become what the flag
// wants.
func valueProblem(fl *flag.Flag, reason string) string {
	if reason != "parse error" && reason != "value out of range" && !strings.Contains(reason, "invalid syntax") {
		return reason
	}
	g, ok := fl.Value.(flag.Getter)
	if !ok {
		return reason
	}
	want := ""
	switch g.Get().(type) {
	case int, int64:
		want = "an integer"
	case uint, uint64:
		want = "a non-negative integer"
	case float64:
		want = "a number"
	case bool:
		want = "true or false"
	case time.Duration:
		want = "a duration such as 500ms, 30s or 1m"
	default:
		return reason
	}
	if reason == "value out of range" {
		return "out of range: want " + want
	}
	return "want " + want
}

// setFlag sets a flag by name from a config file's value, with the errors
// a person can act on.
func setFlag(fs *flag.FlagSet, name, val string) error {
	if err := fs.Set(name, val); err != nil {
		fl := fs.Lookup(name)
		if fl == nil {
			return err
		}
		return fmt.Errorf("%s: %s", quoteValue(val), valueProblem(fl, err.Error()))
	}
	return nil
}

// dashes writes a flag's name as the help does: -v, --listen.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// closestFlag is the defined flag nearest to name by edit distance, when it
// is close enough to be a typo (or name is a prefix of it); "" otherwise.
func closestFlag(fs *flag.FlagSet, name string) string {
	name = strings.TrimLeft(name, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	best, bestD := "", 0
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if best == "" || d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

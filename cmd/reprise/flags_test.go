package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mistake on the command line is one line that says what to type
// instead, not the whole help.
func TestFlagMistakes(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--lisen", "x"}, "reprise serve: unknown flag --lisen; did you mean --listen? (reprise serve -h lists the flags)\n"},
		{[]string{"serve", "-api", "k"}, "reprise serve: unknown flag --api; did you mean --api-key? (reprise serve -h lists the flags)\n"},
		{[]string{"serve", "--zzzzzz"}, "reprise serve: unknown flag --zzzzzz (reprise serve -h lists the flags)\n"},
		{[]string{"generate", "--promt", "x"}, "reprise generate: unknown flag --promt; did you mean --prompt? (reprise generate -h lists the flags)\n"},
		{[]string{"serve", "--max-batch", "lots"}, "reprise serve: --max-batch \"lots\": want an integer\n"},
		{[]string{"serve", "--shutdown-timeout", "3"}, "reprise serve: --shutdown-timeout \"3\": want a duration such as 500ms, 30s or 1m\n"},
		{[]string{"generate", "--steps"}, "reprise generate: flag needs an argument: --steps\n"},
		{[]string{"devices", "extra"}, "reprise devices: unexpected arguments [\"extra\"] (flags take --name value; reprise devices -h lists them)\n"},
	}
	for _, tc := range cases {
		code, out, errs := runCLI(t, tc.args...)
		if code != 2 || out != "" || errs != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr\n%q, want\n%q", tc.args, code, out, errs, tc.want)
		}
	}
}

// Help lists every flag longer than a letter with two dashes, as the docs
// write them.
func TestHelpTwoDashes(t *testing.T) {
	for _, cmd := range []string{"serve", "generate", "devices", "plan", "bench", "loadtest"} {
		code, _, errs := runCLI(t, cmd, "-h")
		if code != 0 {
			t.Errorf("%s -h: exit %d", cmd, code)
		}
		n := 0
		for _, line := range strings.Split(errs, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  -v") {
				if !strings.HasPrefix(line, "  --") {
					t.Errorf("%s -h: %q has one dash", cmd, line)
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("%s -h lists no flags:\n%s", cmd, errs)
		}
	}
}

func TestClosestFlag(t *testing.T) {
	fs := newFlags("x", nil)
	fs.String("listen", "", "")
	fs.String("max-batch", "", "")
	fs.String("max-queue", "", "")
	fs.Bool("v", false, "")
	for name, want := range map[string]string{"listne": "listen", "max-bach": "max-batch", "max": "max-batch",
		"max-queu": "max-queue", "port=80": "", "quux": "", "listen=x": "listen"} {
		if got := closestFlag(fs, name); got != want {
			t.Errorf("closestFlag(%q) = %q, want %q", name, got, want)
		}
	}
}

// Config file errors name the line at fault and what the value should be.
func TestConfigErrors(t *testing.T) {
	cases := []struct{ file, want string }{
		{"listen: a\n: b\n", "line 2: did not find expected key"},
		{"listen: a\nmax_batch: [\n", "line 2: did not find expected node content"},
		{"- a\nb: c\n", "line 2: "},
		{"listen: a\nmax_batch: lots\n", `line 2: max_batch: "lots": want an integer`},
		{"listen: a\n\nshutdown_timeout: 3\n", `line 3: shutdown_timeout: "3": want a duration`},
		{"listen: a\nmax_bach: 3\n", `line 2: unknown setting "max_bach"; did you mean max_batch?`},
		{"listen: a\nlisten: b\n", "line 2: listen is set again (first on line 1)"},
		{"listen: [a, b]\n", "line 1: listen: want a single value, not a list"},
		{"just words\n", `line 1: want a mapping of settings (key: value), not the value "just words"`},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		cfg := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(cfg, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runCLI(t, "serve", "--config", cfg)
		if code != 2 || !strings.Contains(errs, "--config "+cfg+": "+tc.want) {
			t.Errorf("case %d %q: exit %d, stderr %q, want %q", i, tc.file, code, errs, tc.want)
		}
	}
	// Something that is not a small file fails at once.
	if code, _, errs := runCLI(t, "serve", "--config", dir); code != 2 || !strings.Contains(errs, "is a directory") {
		t.Errorf("a directory: exit %d, %q", code, errs)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if code, _, errs := runCLI(t, "serve", "--config", "/dev/zero"); code != 2 || !strings.Contains(errs, "/dev/zero is not a regular file") {
			t.Errorf("/dev/zero: exit %d, %q", code, errs)
		}
	}
}

// --host and --port replace --listen's parts, as vLLM's and llama.cpp's
// users type them.
func TestServeHostPort(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:8080"},
		{[]string{"--port", "9000"}, "127.0.0.1:9000"},
		{[]string{"--host", "0.0.0.0"}, "0.0.0.0:8080"},
		{[]string{"--host", "::1", "--port", "0"}, "[::1]:0"},
		{[]string{"--listen", "localhost:1234", "--port", "99"}, "localhost:99"},
		{[]string{"--listen", "10.0.0.1:5"}, "10.0.0.1:5"},
	}
	for _, tc := range cases {
		fs := newFlags("serve", nil)
		var f serveFlags
		f.register(fs)
		if err := parse(fs, tc.args); err != nil {
			t.Fatal(err)
		}
		if got, err := f.address(fs); err != nil || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.args, got, err, tc.want)
		}
	}
	if code, _, errs := runCLI(t, "serve", "--port", "70000"); code != 2 || !strings.Contains(errs, "--port 70000: want 0 to 65535") {
		t.Errorf("--port 70000: %d %q", code, errs)
	}
}

func TestRedactArgs(t *testing.T) {
	got := redactArgs([]string{"reprise", "serve", "--api-key", "sekrit", "-api-key=two", "--listen", "x", "--api-key"})
	want := []string{"reprise", "serve", "--api-key", "REDACTED", "-api-key=REDACTED", "--listen", "x", "--api-key"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The progress bar is for terminals: /dev/null (a character device) and
// files get log lines.
func TestCaptureProgressTTY(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer null.Close()
	if p := newCaptureProgress(null, nil); p.tty {
		t.Errorf("%s is taken for a terminal", os.DevNull)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p := newCaptureProgress(f, nil); p.tty {
		t.Error("a file is taken for a terminal")
	}
}

// generate says when it has no prompt.
func TestGenerateNoPrompt(t *testing.T) {
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	code, out, errs := runCLI(t, "generate", "--steps", "4", "--graphs", "off", "--device-memory", "64MiB")
	if code != 0 || !strings.Contains(errs, "no --prompt: generating from an empty prompt") || out == "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, _, errs := runCLI(t, "generate", "--prompt", "", "--steps", "2", "--graphs", "off", "--device-memory", "64MiB"); strings.Contains(errs, "no --prompt") {
		t.Errorf("an empty --prompt given is noted: %q", errs)
	}
}

// A model or tokenizer path that names an endless device is a clear error,
// not an allocation of all memory.
func TestGenerateDevZero(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip(err)
	}
	for _, args := range [][]string{
		{"--model", "/dev/zero", "--tokenizer", "/dev/zero"},
		{"--model", "../../model/stories260k/stories260K.bin", "--tokenizer", "/dev/zero"},
	} {
		code, _, errs := runCLI(t, append([]string{"generate", "--prompt", "x", "--graphs", "off", "--device-memory", "64MiB"}, args...)...)
		if code != 1 || !strings.Contains(errs, "/dev/zero") {
			t.Errorf("%q: exit %d, %q", args, code, errs)
		}
	}
}

// A config file never panics the parser, and every error names a line.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"listen: a\nmax_batch: 3\n", "- a\nb: c\n", "a: [1, 2]\n", "a: &x 1\nb: *x\n", "a: 1\na: 2\n", "{a: 1}", ": :\n", "\t\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		settings, err := parseConfig([]byte(s))
		if err != nil && !strings.Contains(err.Error(), "line ") {
			t.Fatalf("%q: %v names no line", s, err)
		}
		for _, st := range settings {
			if st.line < 1 {
				t.Fatalf("%q: setting %+v has no line", s, st)
			}
		}
	})
}

func TestUnknownCommand(t *testing.T) {
	for args, want := range map[string]string{
		"serv":       "reprise: unknown command \"serv\"; did you mean \"serve\"? (reprise help lists the commands)\n",
		"frobnicate": "reprise: unknown command \"frobnicate\" (reprise help lists the commands)\n",
	} {
		if code, _, errs := runCLI(t, args); code != 2 || errs != want {
			t.Errorf("%s: exit %d, %q, want %q", args, code, errs, want)
		}
	}
}

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsText is README.md and docs/*.md, the user's documentation.
func docsText(t *testing.T) string {
	t.Helper()
	files := []string{"../../README.md"}
	more, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(more) == 0 {
		t.Fatalf("docs/*.md: %v %v", more, err)
	}
	var b strings.Builder
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// Every command's flags, as its -h prints them, are in the documentation
// (as --name), so that a flag added in code is documented too.
func TestFlagsDocumented(t *testing.T) {
	docs := docsText(t)
	help := regexp.MustCompile(`(?m)^  --?([a-z0-9-]+)`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, cmd := range names {
		_, out, errs := runCLI(t, cmd, "-h")
		flags := help.FindAllStringSubmatch(out+errs, -1)
		if len(flags) == 0 {
			t.Errorf("%s -h lists no flags: %q", cmd, out+errs)
		}
		for _, m := range flags {
			if m[1] == "v" {
				continue // -v, documented as such
			}
			if !strings.Contains(docs, "--"+m[1]) {
				t.Errorf("reprise %s --%s is not in README.md or docs/*.md", cmd, m[1])
			}
		}
	}
}

// Every REPRISE_* environment variable the code reads is in the README.
func TestEnvDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	env := regexp.MustCompile(`"(REPRISE_[A-Z0-9_]+)"`)
	seen := map[string]string{}
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range env.FindAllStringSubmatch(string(data), -1) {
			seen[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 5 {
		t.Fatalf("found only %v: is the walk looking at the repository?", seen)
	}
	for v, path := range seen {
		if !strings.Contains(string(readme), v) {
			t.Errorf("%s (read in %s) is not in README.md", v, path)
		}
	}
}

// Package golden compares a test's output with a file in its testdata, or
// rewrites the file, as raft's datadriven tests do: a change in order shows
// as a diff under review.
package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Check compares got with the file at path; with rewrite it writes got there
// instead. A difference fails t, quoting the first line that differs.
func Check(t testing.TB, path, got string, rewrite bool) {
	t.Helper()
	if rewrite {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
			return
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to make it)", err)
		return
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		t.Errorf("%s differs from line %d:\ngot  %q\nwant %q\n(run with -rewrite if the change is meant)", path, i+1,
			gl[min(i, len(gl)-1)], wl[min(i, len(wl)-1)])
	}
}

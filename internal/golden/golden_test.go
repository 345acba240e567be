package golden

import (
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps its failures.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, f) }
func (r *recorder) Fatalf(f string, args ...any) { r.errs = append(r.errs, f) }
func (r *recorder) Fatal(args ...any)            { r.errs = append(r.errs, "fatal") }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "trace.txt")
	r := &recorder{TB: t}
	Check(r, path, "a\nb\n", false)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "-rewrite") {
		t.Fatalf("a missing file: %v", r.errs)
	}
	r.errs = nil
	Check(r, path, "a\nb\n", true)
	Check(r, path, "a\nb\n", false)
	if len(r.errs) != 0 {
		t.Fatalf("the rewritten file differs: %v", r.errs)
	}
	Check(r, path, "a\nc\n", false)
	if len(r.errs) != 1 {
		t.Fatalf("a changed line passed: %v", r.errs)
	}
}

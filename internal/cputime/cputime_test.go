package cputime

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// Work on the CPU shows in each clock where it is measured (Process: the
// process's, Thread: the locked thread's), and it never goes back.
func TestClocks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clock    func() time.Duration
		measured []string // the GOOS values that must report it
	}{
		{"Process", Process, []string{"linux", "darwin"}},
		{"Thread", Thread, []string{"linux"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := tc.clock()
			if c0 == 0 {
				if slices.Contains(tc.measured, runtime.GOOS) {
					t.Fatal("no CPU time reported")
				}
				t.Skip("not measured on", runtime.GOOS)
			}
			// Spin until some CPU time shows (a loaded machine may hold
			// this goroutine off its core for a while), for at most 10 s of
			// wall time.
			x, c1 := 1.0, c0
			for start := time.Now(); c1 == c0 && time.Since(start) < 10*time.Second; c1 = tc.clock() {
				for range 100000 {
					x = x*1.0000001 + 1e-9
				}
			}
			if c1 <= c0 {
				t.Fatalf("CPU time %v, then %v after spinning (%v)", c0, c1, x)
			}
		})
	}
}

package cputime

import (
	"runtime"
	"testing"
	"time"
)

// Work on the CPU shows in Process where it is measured, and it never goes
// back.
func TestProcess(t *testing.T) {
	c0 := Process()
	if c0 == 0 {
		if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
			t.Fatal("no CPU time reported")
		}
		t.Skip("CPU time not measured on", runtime.GOOS)
	}
	// Spin until some CPU time shows (a loaded machine may hold this
	// goroutine off its core for a while), for at most 10 s of wall time.
	x, c1 := 1.0, c0
	for start := time.Now(); c1 == c0 && time.Since(start) < 10*time.Second; c1 = Process() {
		for range 100000 {
			x = x*1.0000001 + 1e-9
		}
	}
	if c1 <= c0 {
		t.Fatalf("CPU time %v, then %v after spinning (%v)", c0, c1, x)
	}
}

package cpu

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// TestScheduleTrace: with EnvScheduleTrace=2 a replayed decode step logs
// its phase times every second replay, by kind of phase (named by its
// matmuls, else by its first kernel: the argmax), for each worker;
// a value that is not a count is an error naming the variable.
func TestScheduleTrace(t *testing.T) {
	t.Setenv(EnvScheduleTrace, "x")
	if _, err := Open(accel.Options{Threads: 2}); err == nil || !strings.Contains(err.Error(), EnvScheduleTrace) {
		t.Fatalf("Open with %s=x: %v, want an error naming it", EnvScheduleTrace, err)
	}
	t.Setenv(EnvScheduleTrace, "2")
	var buf bytes.Buffer
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	d := newDecoder(t, e, shapeStories, accel.F32, 1, 1, 20)
	ex := d.capture(t)
	d.replay(t, ex) // the first launch prepares the executable
	buf.Reset()
	for range 4 {
		d.replay(t, ex)
	}
	out := buf.String()
	if n := strings.Count(out, "replay schedule phase times"); n != 2 {
		t.Fatalf("4 replays logged %d reports, want 2:\n%s", n, out)
	}
	for _, want := range []string{"all phases", "| argmax", "w1 items", "(cpu ", "crit cpu", "matmul 172x64 f32"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

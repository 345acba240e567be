//go:build reprise_failpoints

package failpoint

import (
	"errors"
	"testing"
)

func TestFailNth(t *testing.T) {
	defer Reset()
	boom := errors.New("boom")
	hook, fired := FailNth(2, PhaseStep, boom)
	Enable(Alloc, hook)
	if Inject(Alloc) != nil || fired() {
		t.Fatal("fired outside its phase")
	}
	leave := Enter(PhaseStep)
	inner := Enter(PhaseCapture)
	if Current() != PhaseCapture || !In(PhaseStep) {
		t.Fatalf("phase %q", Current())
	}
	if Inject(Alloc) != nil {
		t.Fatal("fired at the first call")
	}
	inner()
	if err := Inject(Alloc); err != boom || !fired() {
		t.Fatalf("second call in phase: %v", err)
	}
	if Inject(Alloc) != nil {
		t.Fatal("fired twice")
	}
	leave()
	if Current() != "" {
		t.Fatalf("phase %q after leaving", Current())
	}
	Enable(Alloc, nil)
	if Inject(Alloc) != nil {
		t.Fatal("a removed hook ran")
	}
}

package alloc

import (
	"errors"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

func TestCaptureState(t *testing.T) {
	a := New(newSource(64 << 20))
	other := New(newSource(64 << 20))
	const stream = 3
	for _, p := range []accel.Pool{nil, other.NewPool()} {
		if _, err := StartCapture[int](a, stream, p); !errors.Is(err, accel.ErrInvalidArgument) {
			t.Errorf("capture into %v: %v, want ErrInvalidArgument", p, err)
		}
	}
	if a.Capturing(stream) != nil {
		t.Fatal("a refused capture routes the stream")
	}
	p := a.NewPool()

	// An invalidated capture keeps its first reason, and ending it gives
	// its blocks back to the pool.
	c, err := StartCapture[int](a, stream, p)
	if err != nil {
		t.Fatal(err)
	}
	if a.Capturing(stream) != p || c.Pool != p {
		t.Fatal("the stream is not routed to the pool")
	}
	if _, err := a.Alloc(stream, 1000); err != nil {
		t.Fatal(err)
	}
	c.Nodes = append(c.Nodes, 1, 2)
	first, second := errors.New("first"), errors.New("second")
	if c.Invalidate(first) != first || c.Invalidate(second) != second {
		t.Fatal("Invalidate does not return its argument")
	}
	if _, err := c.End(); err != first {
		t.Fatalf("End of an invalidated capture: %v, want the first reason", err)
	}
	if st := p.Stats(); st.Allocated != 0 || st.Graphs != 0 {
		t.Fatalf("after an invalidated capture the pool has %+v", st)
	}
	if a.Capturing(stream) != nil {
		t.Fatal("the stream is still routed to the pool")
	}

	// A valid capture counts its graph on the pool and reports what it keeps.
	c, err = StartCapture[int](a, stream, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartCapture[int](a, stream, p); !errors.Is(err, accel.ErrAlreadyCapturing) {
		t.Fatalf("a second capture on the stream: %v, want ErrAlreadyCapturing", err)
	}
	if _, err := a.Alloc(stream, 1000); err != nil {
		t.Fatal(err)
	}
	mem, err := c.End()
	if err != nil {
		t.Fatal(err)
	}
	if mem.Kept != RoundUp(1000) || p.Stats().Graphs != 1 {
		t.Fatalf("graph memory %+v, pool %+v", mem, p.Stats())
	}
	a.GraphDestroyed(p)

	// Abort gives the blocks back and frees the stream for the next capture.
	c, err = StartCapture[int](a, stream, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(stream, 3<<20); err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if st := p.Stats(); st.Allocated != RoundUp(1000) || st.Graphs != 0 {
		t.Fatalf("after an abort the pool has %+v, want only the first graph's block", st)
	}
	if _, err := StartCapture[int](a, stream, p); err != nil {
		t.Fatalf("capture after an abort: %v", err)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

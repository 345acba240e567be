package graph

import (
	"context"
	"testing"

	"github.com/reprise-ml/reprise/accel/cpu"
)

// Executable memory is measured on copies of a walk's first throwaway graph
// (the drop of the device's free memory each copy causes), the copies are
// held until capture (their memory is what the plan's graphs reuse), and
// what the captured executables take is charged outside the allocator.
func TestExecutableMemoryIsMeasured(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{})
	free0 := n.dev.MemInfo().Free
	costs, err := r.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m, ok := r.ExecMemory()[0]
	// The CPU device charges its executables ExecBytesPerNode a node against
	// its capacity, so its free memory says so exactly.
	if !ok || !m.Measured || m.PerNode != cpu.ExecBytesPerNode {
		t.Fatalf("measured %+v (%v), want %d bytes a node", m, ok, cpu.ExecBytesPerNode)
	}
	held := r.ExecHeld()
	if held <= 0 || held%int64(ExecCopies) != 0 {
		t.Fatalf("copies hold %d bytes", held)
	}
	nodes := held / int64(ExecCopies) / cpu.ExecBytesPerNode
	if c := costs[bk(4)]; c.Executable != nodes*cpu.ExecBytesPerNode {
		t.Fatalf("bs=4 executable %d, want %d nodes at the measured rate", c.Executable, nodes)
	}
	if free := n.dev.MemInfo().Free; free0-free < held {
		t.Fatalf("the copies are not held: free memory fell by %d, they took %d", free0-free, held)
	}
	p := Plan(map[string]map[BucketKey]CaptureCost{"p": costs}, 1<<30, held)
	planned := map[BucketKey]bool{}
	for _, k := range p.Buckets["p"] {
		planned[k] = true
	}
	if err := r.Capture(context.Background(), planned); err != nil {
		t.Fatal(err)
	}
	if r.ExecHeld() != 0 {
		t.Fatal("the copies were not released by capture")
	}
	// What the captured graphs take outside the pool: their outputs and
	// their executables, which the plan predicted.
	var exec int64
	for _, b := range r.buckets {
		for _, s := range b.Slots {
			if s.outside != s.exec.Memory() {
				t.Fatalf("%v: charged %d outside, the executable takes %d", b.Key, s.outside, s.exec.Memory())
			}
			exec += s.outside
		}
	}
	if exec == 0 || r.OutsideMemory() != p.Outside["p"] {
		t.Fatalf("outside: %d held, %d predicted (executables %d)", r.OutsideMemory(), p.Outside["p"], exec)
	}
}

package graph

import (
	"math"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// ExecCopies is how many executables ExecMemory instantiates from a walk's
// first throwaway graph to measure what one takes.
const ExecCopies = 4

// ExecMemory is the executable memory a walk's graphs take per node, outside
// any pool, measured on copies of its first throwaway graph: executables
// instantiated from it, each read as the drop of the device's free memory.
// The cost per node changes with a graph's size, but a walk's graphs are
// about the same size, so the first graph's rate holds for all of them.
//
// The copies are held until the runner captures: a driver may keep a
// destroyed executable's memory to reuse and map new memory beside it, so
// after any destroy free memory drops by less than a copy takes, and a later
// measurement would read low. Held, they are memory the plan's graphs reuse
// (Plan's reusable term) rather than charge twice.
type ExecMemory struct {
	// PerNode is bytes per node; 0 when no copy could be counted (the
	// backend's own figure, Exec.Memory, is used then).
	PerNode float64
	// Measured reports whether PerNode came from free memory, not from the
	// backend's Exec.Memory.
	Measured bool
	// Held is the free memory the held copies took.
	Held  int64
	execs []accel.Exec
}

// measureExec instantiates ExecCopies copies of g and measures each as the
// drop in the device's free memory. Counting starts at the first copy that
// takes free memory, since copies until then fill pieces the device mapped
// earlier. Where the counted copies did not all take the same, the device
// maps memory in pieces (2 MiB on CUDA) and the first counted copy may start
// partway into one, so one piece is added. Free memory is the device's, so
// another process allocating or freeing moves it: the count is kept only if
// free memory never rose and no copy took more than two pieces above the
// mean; otherwise PerNode is the largest rate one copy gave.
func measureExec(dev accel.Device, g accel.Graph) *ExecMemory {
	m := &ExecMemory{}
	nodes := g.Nodes()
	if nodes == 0 {
		return m
	}
	var took []int64
	rose := false
	for range ExecCopies {
		f0 := dev.MemInfo().Free
		e, err := g.Instantiate()
		if err != nil {
			break
		}
		f1 := dev.MemInfo().Free
		m.execs = append(m.execs, e)
		m.Held += max(0, f0-f1)
		if f1 > f0 {
			rose = true
		}
		if len(took) > 0 || f0 > f1 {
			took = append(took, f0-f1)
		}
	}
	if len(took) == 0 {
		return m
	}
	var sum, hi int64
	same := true
	for _, t := range took {
		sum += t
		hi = max(hi, t)
		same = same && t == took[0]
	}
	mean := float64(sum) / float64(len(took))
	const piece = alloc.SegmentSize
	if !same {
		sum += piece
	}
	if rose || float64(hi) > mean+2*piece {
		m.PerNode = float64(hi) / float64(nodes)
	} else {
		m.PerNode = float64(sum) / float64(len(took)*nodes)
	}
	m.Measured = m.PerNode > 0
	return m
}

// bytes is what an executable of n nodes takes by the measured rate, or the
// backend's figure for e where nothing was measured.
func (m *ExecMemory) bytes(n int, e accel.Exec) int64 {
	if m == nil || !m.Measured {
		return e.Memory()
	}
	return int64(math.Ceil(m.PerNode * float64(n)))
}

// release destroys the held copies.
func (m *ExecMemory) release() {
	if m == nil {
		return
	}
	for _, e := range m.execs {
		e.Destroy()
	}
	m.execs, m.Held = nil, 0
}

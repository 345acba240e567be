package accel

import (
	"fmt"
	"runtime/debug"
)

// Capture records fn's work on s into a graph whose allocations come from
// pool. However fn ends, s leaves capture mode and pool accepts the next
// capture: on an error or a panic inside fn, blocks the capture allocated
// go back to the pool and the error (wrapping ErrCaptureFailed, with the
// panic's value and stack) is returned; on an invalidated capture the cause is
// returned. Callers never see a stream stuck capturing, which would sink
// every later capture on it.
func Capture(s Stream, pool Pool, fn func() error) (g Graph, err error) {
	if err := s.BeginCapture(pool); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			s.AbortCapture()
			g, err = nil, fmt.Errorf("accel: panic during capture: %v: %w\n%s", r, ErrCaptureFailed, debug.Stack())
		}
	}()
	if ferr := fn(); ferr != nil {
		s.AbortCapture()
		return nil, fmt.Errorf("accel: %w: %w", ErrCaptureFailed, ferr)
	}
	return s.EndCapture()
}

// NodeSig is what Exec.Update requires unchanged in each recorded node: its
// kind, in the backend's own numbering (kernel, copy, an executable launched
// during capture), and a kernel's Op.
type NodeSig struct {
	Kind uint8
	Op   Op
}

func (s NodeSig) String() string {
	if s.Op == 0 {
		return fmt.Sprintf("kind %d", s.Kind)
	}
	return fmt.Sprintf("kind %d (%v)", s.Kind, s.Op)
}

// Topology is the signature of each of nodes, sig giving one node's.
func Topology[N any](nodes []N, sig func(*N) NodeSig) []NodeSig {
	s := make([]NodeSig, len(nodes))
	for i := range nodes {
		s[i] = sig(&nodes[i])
	}
	return s
}

// CheckTopology returns nil when a graph's topology (got) equals an
// executable's (have), and otherwise an error wrapping ErrTopologyChanged that
// says where they part: Exec.Update checks it before changing anything.
func CheckTopology(got, have []NodeSig) error {
	if len(got) != len(have) {
		return fmt.Errorf("%d nodes, executable has %d: %w", len(got), len(have), ErrTopologyChanged)
	}
	for i := range got {
		if got[i] != have[i] {
			return fmt.Errorf("node %d is %v, executable's is %v: %w", i, got[i], have[i], ErrTopologyChanged)
		}
	}
	return nil
}

// Package failpoint injects faults at named points of reprise's code, in
// the style of etcd's gofail, for tests of what happens when things fail:
// an allocation that fails at the N-th call during a capture, a step or a
// pre-plan, a kernel error in a replay, a stream whose client stalls.
//
// The points are compiled out of normal builds: without the build tag
// reprise_failpoints, Inject is a function that returns nil and Enter one
// that returns a no-op, both inlined away, and Enable does not exist, so
// only tests built with the tag can arm a point:
//
//	go test -tags reprise_failpoints -run Failpoint ./serve
//
// A call site is one line: "if err := failpoint.Inject(failpoint.Alloc);
// err != nil { return ..., err }" where the fault is an error, or "defer
// failpoint.Enter(failpoint.PhaseCapture)()" to mark a phase that hooks
// may look at (Current).
//
// Invariants: with no hook enabled, every point is a no-op in either
// build; hooks run on the goroutine that reaches the point, and may block
// (a stall) or return an error (a fault).
package failpoint

// Names of the points and phases the code has.
const (
	// Alloc is reached by every allocation of the caching allocator
	// (accel/alloc), before it allocates.
	Alloc = "alloc"
	// Replay is reached before a captured graph is launched (graph).
	Replay = "replay"
	// StreamEvent is reached before a server-sent event is written, after
	// its write deadline is set (serve).
	StreamEvent = "stream-event"
	// Plan is reached before the engine admits and plans a step's
	// resources (engine): in a step, and in the pre-plan of the next decode
	// step, which on the CPU device allocates nothing, so Alloc cannot reach
	// it there.
	Plan = "plan"

	// PhaseCapture is a graph capture (graph); PhaseStep an engine step;
	// PhasePrePlan the pre-planning of the next decode step (engine).
	PhaseCapture = "capture"
	PhaseStep    = "step"
	PhasePrePlan = "preplan"
)

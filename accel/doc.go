// Package accel is reprise's device abstraction: one interface for every kind of
// accelerator, and one implementation per kind (accel/cpu, accel/opencl,
// accel/cuda), registered by name the way database/sql registers drivers.
//
// A Backend opens Devices. A Device has memory with a real capacity, served by a
// caching allocator with graph pools (package accel/alloc); Streams, ordered and
// asynchronous to the host; Events; pinned host memory for staging; and the
// kernels a Llama-family decoder needs, described once here (Op, Call and the
// typed launchers in kernels.go) and implemented by each backend.
//
// A Stream can capture: between BeginCapture(pool) and EndCapture the work
// launched on it is recorded, not run, and its allocations come from the pool.
// The resulting Graph is instantiated into an Exec that one Launch replays, and
// an Exec can be updated in place when only kernel arguments changed.
//
// Invariants every backend keeps:
//   - Code outside a backend never branches on the kind of device: it asks the
//     device's Capability.
//   - Probing a backend (Probe, Backends) initialises nothing and has no side
//     effects; a missing library is a clear error, not a crash.
//   - Out of memory is an error value (errors.Is(err, ErrOutOfMemory)) that
//     leaves the allocator consistent.
//   - A capture that fails (an error, a synchronisation on the capturing stream,
//     or a panic in the captured code, see Capture) leaves the stream out of
//     capture mode and the pool ready for the next capture.
//   - A replay reads the current contents of the buffers it was captured with,
//     and produces what eager execution of the same calls would produce. On the
//     CPU device the two are bit-identical.
package accel

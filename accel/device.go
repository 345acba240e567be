package accel

import (
	"errors"
	"fmt"
)

// Errors every backend reports with the same meaning. Check them with errors.Is:
// backends wrap them with what was asked and what was left.
var (
	// ErrOutOfMemory: the device could not satisfy an allocation. The
	// allocator is left consistent and the caller may free memory and retry.
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrCaptureInvalidated: something not allowed during capture happened on
	// a capturing stream (a synchronisation, a read back to the host, a wait on
	// an event recorded outside the capture). The capture cannot produce a
	// graph; EndCapture reports this error and leaves capture mode.
	ErrCaptureInvalidated = errors.New("capture invalidated")
	// ErrCaptureFailed: the captured function returned an error or panicked.
	ErrCaptureFailed = errors.New("capture failed")
	// ErrNotCapturing: EndCapture on a stream that is not capturing.
	ErrNotCapturing = errors.New("stream is not capturing")
	// ErrAlreadyCapturing: BeginCapture on a stream that already captures.
	ErrAlreadyCapturing = errors.New("stream is already capturing")
	// ErrTopologyChanged: Exec.Update was given a graph whose nodes differ in
	// kind or number from the executable's; only arguments may change.
	ErrTopologyChanged = errors.New("graph topology changed")
	// ErrUnsupported: the device does not offer what was asked. Ask the
	// Capability first.
	ErrUnsupported = errors.New("not supported by this device")
	// ErrBackendUnavailable: the backend's library or hardware is missing.
	ErrBackendUnavailable = errors.New("backend unavailable")
	// ErrClosed: the device or stream was closed.
	ErrClosed = errors.New("closed")
	// ErrInvalidArgument: a kernel launch or copy whose operands do not fit
	// its shapes; nothing was launched.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Capability is what a device can do, asked once and cached. Every layer above
// accel consults it instead of testing the kind of device.
type Capability struct {
	// Available is false when the device was found but cannot run work.
	Available bool `json:"available"`
	// PinnedMemory: host memory can be page-locked for asynchronous copies.
	PinnedMemory bool `json:"pinned_memory"`
	// GraphCapture: streams can capture work into replayable graphs.
	GraphCapture bool `json:"graph_capture"`
	// GraphUpdate: an executable can be updated in place when only kernel
	// arguments changed (otherwise update means re-instantiating).
	GraphUpdate bool `json:"graph_update"`
	// MemoryTotal is the device memory in bytes.
	MemoryTotal int64 `json:"memory_total"`
	// Deterministic: kernels give the same bits for the same inputs whatever
	// the batch, padding or mode, so replay equals eager exactly. Where false,
	// replay equals eager within float tolerance.
	Deterministic bool `json:"deterministic"`
	// ComputeUnits is the number of parallel units (cores, SMs, CUs).
	ComputeUnits int `json:"compute_units"`
	// KVCacheF16: OpKVWrite and OpAttention take F16 caches (half the
	// bytes of F32: twice the positions in the same memory, and half the
	// bytes a decode step's attention reads).
	KVCacheF16 bool `json:"kv_cache_f16"`
}

// DeviceInfo names a device.
type DeviceInfo struct {
	Backend string `json:"backend"` // registry name: "cpu", "opencl", "cuda"
	Ordinal int    `json:"ordinal"` // index among the backend's devices
	Name    string `json:"name"`    // what the device calls itself
	Vendor  string `json:"vendor"`
	Detail  string `json:"detail,omitempty"` // free text: driver, platform, versions
}

func (d DeviceInfo) String() string { return fmt.Sprintf("%s:%d (%s)", d.Backend, d.Ordinal, d.Name) }

// MemInfo is a device's memory: Free is what the device could still hand out
// (not counting memory cached by the allocator), Total its capacity.
type MemInfo struct {
	Free  int64
	Total int64
}

// Device is one accelerator.
type Device interface {
	Info() DeviceInfo
	// Capability is cached: it never initialises anything and is cheap.
	Capability() Capability
	// MemInfo reports the device's free and total memory.
	MemInfo() MemInfo
	// Allocator is the device's caching allocator (statistics, pools).
	Allocator() Allocator
	// Alloc allocates n bytes from the default pool, usable by any stream.
	Alloc(n int64) (Buffer, error)
	// Free returns a buffer from Alloc. The caller guarantees no stream still
	// uses it (synchronise first).
	Free(b Buffer) error
	// AllocHost allocates n bytes of pinned host memory.
	AllocHost(n int64) (HostBuffer, error)
	// FreeHost releases pinned host memory.
	FreeHost(h HostBuffer) error
	// NewPool makes a graph pool: a private region of the allocator that
	// captures allocate from (see Pool).
	NewPool() (Pool, error)
	NewStream() (Stream, error)
	NewEvent() (Event, error)
	// Synchronize waits for all work on all streams.
	Synchronize() error
	// Close releases the device. Using it afterwards returns ErrClosed.
	Close() error
}

// WeightPacker is implemented by a device that keeps weight matrices in a
// layout of its own for its kernels (the CPU device packs them into panels
// for its vector kernels). PackWeights makes that copy now, so its memory is
// charged before anyone sizes a cache from MemInfo; a device without room
// may decline (the kernels then read the row-major bytes, with the same
// results). Weights must not be written after they are packed except
// through the device, which drops stale copies.
type WeightPacker interface {
	PackWeights(weights ...Tensor) error
}

// HostAliaser is implemented by a device whose memory is the host's own
// (the CPU device): instead of copying host bytes into a buffer of its own,
// it can read them where they lie, so that a weight a file stores exactly
// as the device would (a memory-mapped file's pages) is used in place, with
// no copy and no fresh memory. A device without it, or one that declines
// (an error wrapping ErrUnsupported), is given a copy (Alloc and an upload).
//
// An aliased buffer is read only: a kernel launch, a copy or an upload that
// would write it fails with ErrInvalidArgument before anything runs, so the
// device never writes the host's bytes (a read-only mapping would fault).
type HostAliaser interface {
	// AliasHost returns a buffer of len(b) bytes that reads b. The caller
	// keeps b valid and unchanged until the device calls release, once:
	// when the buffer is freed (Device.Free, not Stream.Free) or the device
	// is closed. The bytes are charged to the device's memory like an
	// allocation (ErrOutOfMemory when they do not fit). On error release is
	// not called and the caller still owns b.
	AliasHost(b []byte, release func()) (Buffer, error)
}

// Allocator exposes the caching allocator's accounting.
type Allocator interface {
	// Stats is a consistent snapshot of the allocator.
	Stats() AllocStats
	// EmptyCache returns cached, unused segments of the default pool to the
	// device.
	EmptyCache()
	// ResetPeak restarts the peak figures from the current ones, so that
	// Stats().PeakAllocated - Allocated measures what a step of work took
	// at its most.
	ResetPeak()
}

// AllocStats is the allocator's accounting. Reserved counts whole segments
// taken from the device, Allocated the live blocks inside them.
type AllocStats struct {
	Reserved       int64
	Allocated      int64
	PeakAllocated  int64
	PeakReserved   int64
	Segments       int
	Pools          int // live graph pools
	PoolReserved   int64
	PoolAllocated  int64
	NumAllocs      int64
	NumFrees       int64
	NumOOM         int64
	SegmentsFreed  int64
	DeviceCapacity int64
}

// Pool is a graph pool. While a stream captures into a pool, that stream's
// allocations come from it; blocks freed during a capture return to the pool
// and serve later captures into it. Every graph captured into the pool holds
// the pool's memory until the graph is destroyed: a graph's replay writes its
// scratch wherever capture put it, so that memory must not be handed to
// anyone else while the graph lives.
type Pool interface {
	// ID distinguishes pools in logs and plans.
	ID() int
	// Stats is the pool's own accounting.
	Stats() PoolStats
	// Release drops the caller's reference. Once released and once every
	// graph captured into it is destroyed, its memory returns to the device.
	Release()
}

// PoolStats is one pool's accounting.
type PoolStats struct {
	Reserved  int64 // bytes of segments the pool holds
	Allocated int64 // bytes of live blocks
	Graphs    int   // live graphs captured into it
}

// Stream is an ordered queue of device work, asynchronous to the host: a launch
// returns before the work runs.
type Stream interface {
	Device() Device
	// Launch enqueues one kernel call (or records it while capturing).
	// Operands are validated first; an invalid call launches nothing.
	Launch(c *Call) error
	// Copy enqueues a device-to-device copy; the two views must have equal
	// length.
	Copy(dst, src Buffer) error
	// CopyHtoD enqueues a copy from pinned host memory. The host bytes are
	// read when the copy runs (at each replay, if captured).
	CopyHtoD(dst Buffer, src HostBuffer) error
	// CopyDtoH enqueues a copy to pinned host memory. Not allowed while
	// capturing (it invalidates the capture).
	CopyDtoH(dst HostBuffer, src Buffer) error
	// Record marks e complete once the work enqueued so far has run.
	Record(e Event) error
	// Wait makes work enqueued later wait until e completes.
	Wait(e Event) error
	// Synchronize blocks until all enqueued work has run. On a capturing
	// stream it invalidates the capture and returns ErrCaptureInvalidated.
	Synchronize() error
	// Alloc allocates n bytes in stream order: a block this stream freed is
	// reused at once, since its earlier users ran before anything enqueued
	// later. While capturing, allocations come from the capture's pool.
	Alloc(n int64) (Buffer, error)
	// Free returns a block from Alloc in stream order.
	Free(b Buffer) error
	// BeginCapture starts recording into a graph whose allocations come from
	// pool.
	BeginCapture(pool Pool) error
	// EndCapture stops recording and returns the graph; after an invalidated
	// capture it returns the cause, and the stream has left capture mode either
	// way.
	EndCapture() (Graph, error)
	// AbortCapture leaves capture mode, discarding what was recorded and
	// returning blocks allocated during the capture to the pool. It is a no-op
	// on a stream that does not capture.
	AbortCapture()
	// Capturing reports whether the stream records rather than runs.
	Capturing() bool
	// Close waits for the stream's work and releases it.
	Close() error
}

// Event marks a point in a stream's work.
type Event interface {
	// Query reports whether the recorded work has run (true if never recorded).
	Query() bool
	// Synchronize blocks until the recorded work has run.
	Synchronize() error
}

// GraphMemory is what a captured graph holds: bytes of its pool that are still
// allocated when capture ended (Kept), bytes the pool grew by during the
// capture (PoolGrowth: kept plus scratch the graph freed but must keep), and
// device memory allocated outside any pool during the capture (Outside).
type GraphMemory struct {
	Kept       int64
	PoolGrowth int64
	Outside    int64
}

// Graph is recorded work, not yet executable.
type Graph interface {
	// Nodes is the number of recorded operations.
	Nodes() int
	Memory() GraphMemory
	// Instantiate makes an executable. It may take device memory outside any
	// pool (Exec.Memory).
	Instantiate() (Exec, error)
	// Destroy releases the graph; its pool memory is released once no graph
	// of the pool lives and the pool is released.
	Destroy()
}

// Exec is an instantiated graph: Launch replays it with one call.
type Exec interface {
	Nodes() int
	// Memory is the device memory the executable holds outside any pool.
	Memory() int64
	// Launch enqueues one replay on s.
	Launch(s Stream) error
	// Update takes g's kernel arguments in place. g must have the same
	// topology (same operations in the same order); otherwise it returns
	// ErrTopologyChanged and the executable is unchanged.
	Update(g Graph) error
	Destroy()
}

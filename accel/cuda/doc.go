// Package cuda is reprise's CUDA backend, registered as "cuda": NVIDIA GPUs
// through the CUDA driver API, with stream capture as its graphs.
//
// Status: written and tested without a GPU. What runs here is the library
// search, the mapping of every accel.Op to its kernel's arguments (checked
// against the kernel signatures parsed from kernels.cu, and against the
// parameter sizes in the PTX), the column-major cuBLAS argument mapping, an
// emulation of the sampling kernel's parallel algorithm, and, where NVRTC
// is installed (REPRISE_CUDA_LIBRARY_PATH pointing at Debian's non-free
// libnvrtc11.2 will do), the compilation of kernels.cu for sm_80 and sm_90,
// CUBIN and PTX. The driver's, NVRTC's and cuBLAS's entry points were
// resolved against real libraries (driver 535, NVRTC 11.8, cuBLAS 11.11)
// and cuInit called through purego, on a machine without a GPU. Nothing has
// run on a GPU until scripts/device-check.sh has passed on one; until then
// treat the device behaviour described below as the design, not as a
// measurement.
//
// # Loading
//
// Nothing is linked: libcuda, NVRTC and cuBLAS are loaded at run time with
// github.com/ebitengine/purego, so the package builds with CGO_ENABLED=0 and
// without the CUDA toolkit, and a binary runs where CUDA is missing (Probe
// reports it unavailable). The backend is built on Linux (amd64, arm64);
// elsewhere "cuda" is registered and always unavailable.
//
// Each library is searched in this order:
//
//  1. the directories of REPRISE_CUDA_LIBRARY_PATH (colon separated), each
//     for the library's versioned files;
//  2. the bare sonames, through the dynamic loader's own search
//     (LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib): libcuda.so.1 then
//     libcuda.so; libnvrtc.so.N and libcublas.so.N for N from the driver's
//     CUDA major version down to 11, then the unversioned names;
//  3. the usual directories, globbed, newest first: /usr/local/nvidia/lib64,
//     /usr/local/cuda/lib64, /usr/local/cuda-*/lib64 (and their
//     targets/*/lib), /usr/lib/x86_64-linux-gnu, /usr/lib64, the entries of
//     LD_LIBRARY_PATH, and Python's nvidia wheels (site-packages/nvidia/*/lib,
//     including /opt/torch/.venv).
//
// The toolkit's stub libcuda (a "stubs" directory) is never taken. A library
// that is not found is an error wrapping accel.ErrBackendUnavailable that
// names every path tried and why each failed. NVRTC newer than the driver is
// passed over while an older one loads (its PTX could be too new for the
// driver); cuBLAS of a newer major version than the driver's is refused.
// REPRISE_CUDA_CUBLAS=0 (or off) keeps cuBLAS out altogether.
//
// Probe dlopens libcuda and closes it: no cuInit. Devices calls cuInit and
// lists the devices (cuDeviceGetCount, cuDeviceGetName, cuDeviceTotalMem_v2,
// the compute capability and multiprocessor count); it opens none. A driver
// older than CUDA 12.0 is refused (cuGraphExecUpdate_v2's signature).
//
// # Open
//
// Open retains the device's primary context (cuDevicePrimaryCtxRetain; Close
// releases it), compiles kernels.cu with NVRTC for the device's compute
// capability (options --gpu-architecture=sm_XY, -default-device,
// --fmad=false: a CUBIN, falling back to compute_XY PTX, or to the newest
// architecture an older NVRTC knows), loads it with cuModuleLoadData and
// resolves every kernel. The image is compiled once per process and
// architecture; each Open loads it again. Where NVRTC is missing or fails, a
// device of compute capability 8.0 or later loads kernels_fallback.ptx
// instead: kernels.cu compiled ahead of time (by NVRTC 11.8, whose PTX every
// newer driver compiles), embedded, and used only while the sha256 of
// kernels.cu it records is the current file's (TestFallbackPTX regenerates
// it, and fails where NVRTC is at hand and the fallback is stale). If
// neither works, Open's error carries NVRTC's log. Device.Info().Detail says
// which image was loaded, built by what, and whether MatMul uses cuBLAS.
//
// Capability: GraphCapture and GraphUpdate true, PinnedMemory true,
// MemoryTotal Options.MemoryLimit or else the device's total memory,
// Deterministic false (cuBLAS picks its algorithms per shape, so a row's
// product may depend on the batch), ComputeUnits the multiprocessor count.
//
// # Threading
//
// The driver keeps the current context per OS thread, and a goroutine may
// change threads between any two calls. So every driver call goes between
// Device.enter, which locks the goroutine to its thread
// (runtime.LockOSThread) and makes the device's primary context current
// there if it is not (cuCtxGetCurrent, cuCtxSetCurrent), and Device.leave,
// which unlocks. The locks nest.
//
// Capture uses CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, which wants
// BeginCapture and EndCapture on one thread: BeginCapture leaves its
// goroutine locked to the thread until EndCapture or AbortCapture, which the
// same goroutine must call (accel.Capture and the graph runner do). Other
// goroutines go on using the device meanwhile: thread-local mode does not
// police them. On the capturing thread, the calls that stream capture would
// refuse but the allocator needs (cuMemAlloc for a pool that grows,
// cuMemGetInfo, cuMemHostAlloc) run in relaxed capture mode
// (cuThreadExchangeStreamCaptureMode). cuMemFree and cuMemFreeHost, which
// may synchronise the device, are put off while any stream of the device
// captures and run when the last capture ends. Device.Synchronize
// synchronises each stream that is not capturing, never the whole context.
//
// A stream's mutex serialises its launches: the kernel arguments are laid
// out in a per-stream block pinned for the stream's life (kernelParams
// points into it), so a launch allocates nothing.
//
// # Memory
//
// Device memory is the caching allocator of accel/alloc over cuMemAlloc_v2
// segments; a Buffer is a (segment, offset) view and its device address the
// segment's base plus the offset, checked to be element aligned. Segments
// and instantiated executables are charged against MemoryTotal; running out
// of it, or the driver's CUDA_ERROR_OUT_OF_MEMORY, is accel.ErrOutOfMemory.
// MemInfo's Free is the capacity less what is charged, but never more than
// cuMemGetInfo's free memory. An executable is charged the larger of
// ExecBytesPerNode per recorded operation and the drop of cuMemGetInfo's free
// memory across cuGraphInstantiateWithFlags (a measurement another
// goroutine's allocations could inflate). Outside the accounting: the
// module, each stream's 32 MiB cuBLAS workspace (kept, with its handle,
// until the device closes: graphs captured on the stream keep using it) and
// the primary context's own overhead.
//
// Pinned host memory is cuMemHostAlloc (portable); a HostMemory's Bytes are
// the pinned region itself. Close frees whatever is left.
//
// # Streams, events and graphs
//
// Streams are cuStreamCreate(CU_STREAM_NON_BLOCKING): they never synchronise
// with the legacy default stream, which reprise does not use. Launch
// validates the call (accel.Call.Validate, then this device's memory and
// alignment) and launches its kernel; copies are cuMemcpy{DtoD,HtoD,DtoH}
// Async_v2 (host to device only from pinned memory, so a captured upload
// reads the host bytes at each replay). Events are cuEventCreate with timing
// disabled; an event nobody references is destroyed by a cleanup, the rest
// at Close.
//
// Capture is the driver's stream capture: work issued while capturing is
// recorded by the driver, and reprise keeps beside it the list of the
// operations issued (the Graph's Nodes, and the topology Update compares).
// Synchronize, CopyDtoH, Record and Wait on a capturing stream fail with
// accel.ErrCaptureInvalidated before reaching the driver, and the driver's
// own capture errors (CUDA_ERROR_STREAM_CAPTURE_*) map to it too; EndCapture
// then reports the cause and AbortCapture ends the capture, destroys what
// the driver recorded and returns the capture's blocks to the pool.
// Instantiate is cuGraphInstantiateWithFlags; Exec.Launch is cuGraphLaunch;
// an executable launched on a capturing stream has its operations issued
// again there (inlined, as the CPU device does). Update refuses a graph of
// another topology (node kinds, ops or count) with accel.ErrTopologyChanged
// before asking the driver, leaving the executable unchanged; otherwise it is
// cuGraphExecUpdate_v2, and where the driver refuses (it compares more than
// reprise records, such as which kernels cuBLAS chose) the executable is
// re-instantiated from the new graph and replaces the old one. Graphs and
// executables hold their pool, so its memory outlives neither.
//
// # Kernels
//
// kernels.cu holds every accel.Op in CUDA C++, compiled without headers.
// Each kernel keeps a row's (token's) result independent of the other rows
// of its launch, uses no atomics (a replay gives eager execution's bits) and
// no contracted multiply-add. MatMul is cuBLAS's cublasSgemm_v2 for float32
// weights of at least 65536 elements, on the stream's handle (workspace set
// before any capture, default math mode: no TF32), mapped from row-major
// y = x·Wᵀ to column major as C(O×T) = Wᵀ·X (transa T, lda ldb I, ldc O);
// every other product, bf16 weights included, is k_matmul_*: a warp per
// output, the inputs' rows staged in shared memory, the weights widened to
// float32 and the products summed in float32 in an order that depends on
// the input width alone. Attention is one block per (token, head) with an
// online softmax per warp, merged at the end; positions and page tables are
// read from device memory at each replay. OpSample is one block per row:
// accel.SampleUniform's SplitMix64 in unsigned 64-bit arithmetic, top-k and
// top-p by bisection over the logits' order keys, the draw in index order;
// temperature <= 0 is the argmax (first maximum).
package cuda

// ExecBytesPerNode is the least device memory an instantiated graph is
// charged per recorded operation, outside any pool. Instantiate charges the
// larger of this estimate and the drop in the driver's free memory it
// measures across cuGraphInstantiateWithFlags. (It is declared here, without
// build constraints, so that tests name it on every platform.)
const ExecBytesPerNode = 1024

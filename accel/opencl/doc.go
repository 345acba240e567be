// Package opencl is reprise's OpenCL backend, registered as "opencl": a real
// accelerator API whose cl_khr_command_buffer is its graph. It runs on PoCL
// (CPU) in CI and on any OpenCL 1.2+ device with a little-endian, byte
// addressable global memory (Intel, AMD and NVIDIA GPUs included).
//
// The OpenCL library is loaded at run time with github.com/ebitengine/purego,
// so the package builds without cgo (CGO_ENABLED=0) and without OpenCL
// headers, and a binary without OpenCL installed still runs: the backend's
// Probe reports it unavailable. It works on Linux and macOS on 64-bit
// little-endian machines (amd64, arm64, riscv64, loong64); elsewhere the
// backend is registered but always unavailable.
//
// # Loading
//
// Probe dlopens the library and closes it again, initialising nothing. It
// tries libOpenCL.so.1 then libOpenCL.so (on macOS the OpenCL framework);
// the environment variable REPRISE_OPENCL_LIBRARY, when set, names the only
// library tried (a path or a soname). A library that does not load is an
// error wrapping accel.ErrBackendUnavailable that names every path searched.
// Devices and Open load it for good; ordinals count devices across platforms
// in the order the ICD loader lists them, and a loader without any platform
// (no vendor driver in /etc/OpenCL/vendors) is a clear error, also wrapping
// accel.ErrBackendUnavailable.
//
// The first Open of a device creates its context and builds the kernels (one
// embedded OpenCL C program, kernels.cl); both are kept for the life of the
// process and shared by later Opens of the same device, so the program is
// built once. PoCL caches compiled kernels on disk (POCL_CACHE_DIR, by default
// ~/.cache/pocl/kcache): the first build on a machine takes about a second,
// later ones tens of milliseconds.
//
// # Capability
//
// Capability comes from the device's own answers, never from its name:
// GraphCapture if it offers cl_khr_command_buffer (and its entry points
// resolve), GraphUpdate if it also offers
// cl_khr_command_buffer_mutable_dispatch, MemoryTotal is Options.MemoryLimit
// or else CL_DEVICE_GLOBAL_MEM_SIZE, ComputeUnits is
// CL_DEVICE_MAX_COMPUTE_UNITS. PinnedMemory and Deterministic are true on
// every device (see the invariants). Without cl_khr_command_buffer,
// BeginCapture returns accel.ErrUnsupported.
//
// # Memory
//
// Device memory is the caching allocator of package accel/alloc over cl_mem
// segments; a Buffer is a (segment, offset) view, and every kernel takes an
// element offset with each buffer. Segments and instantiated executables
// (ExecBytesPerNode per recorded command) are charged against MemoryTotal,
// so MemInfo is exact and running out is accel.ErrOutOfMemory. Pinned host
// memory is a CL_MEM_ALLOC_HOST_PTR cl_mem mapped once for its whole life:
// its bytes are the mapped region. CopyHtoD is a device copy from that cl_mem
// (recordable in a command buffer, which has no host-write command) and
// CopyDtoH a read into the mapped region, so no asynchronous transfer ever
// holds a Go slice. (Using a buffer while it is mapped is left to the
// implementation by the OpenCL specification; PoCL and the GPU drivers serve
// such buffers from the mapped memory itself.)
//
// # Streams, events and graphs
//
// A stream is one in-order command queue. Launch validates the call and
// enqueues its kernel, or while capturing appends it to a list, as the CPU
// device does; Synchronize, CopyDtoH, Record and Wait on a capturing stream
// invalidate the capture (accel.ErrCaptureInvalidated). An event is a marker
// (clEnqueueMarkerWithWaitList, flushed), waited on by another queue with a
// barrier. Instantiate records the list into a cl_khr_command_buffer with
// CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR, one kernel object per command (PoCL
// reads kernel arguments at replay, not at recording), each command waiting on
// the one before through sync points; copies are recorded as copy kernels,
// since the extension's copy commands changed signature between revisions.
// A child executable launched during capture is inlined. Exec.Launch enqueues
// the command buffer on the stream's queue (command buffers are recorded on a
// device-private queue of the same properties, which the extension lets a
// compatible queue stand in for; a driver that refuses gets the replay on the
// recording queue, ordered with the stream by events, and a driver that
// rejects the simultaneous-use flag gets each replay after the previous one). Update compares topology (the
// same kinds and ops in the same order; otherwise accel.ErrTopologyChanged
// and the executable is unchanged) and re-records a new command buffer that
// replaces the old one; mutable dispatch is not used yet. Replays already
// enqueued keep the old command buffer, which OpenCL frees once they have
// run. Executables hold references on the cl_mems they use, so destroying a
// graph or releasing its pool never leaves a live executable pointing at
// freed memory; Device.Close releases the device's segments, streams and
// queues, and executables should be destroyed before it.
//
// # Invariants
//
//   - Each kernel computes an output element (or row) in one work-item, in a
//     fixed sequential order, without contracted multiply-adds (FP_CONTRACT
//     OFF; the float32 and bf16 matmuls call fma() per term, as the CPU
//     device fuses them), so results do not depend on the batch, the padding
//     or eager against replay: the device is Deterministic. Matrix products,
//     additions and the data
//     movement kernels give the CPU device's bits; exp, sin and cos are the
//     device's own, so softmax, SiLU and RoPE agree with the CPU device only
//     within float tolerance.
//   - OpSample draws accel.SampleUniform(seed, offset), SplitMix64 in OpenCL
//     C, bit for bit. Its top-k and top-p sets are found by bisection over
//     the logits' order (ties to the lower index), without scratch memory,
//     and the draw walks the candidates in index order.
//   - RoPE's frequencies are computed on the host as accel.RoPEFreq does and
//     kept on the device per (head size, theta) until Close.
//
// # PoCL
//
// PoCL 3.1 (Debian 12: pocl-opencl-icd with ocl-icd-libopencl1) offers one
// CPU device with cl_khr_command_buffer 0.9.0 and no mutable dispatch, so
// there GraphCapture is true and GraphUpdate false. It expands a command
// buffer into individual commands at each enqueue, so a replay costs about
// what eager launches cost: on PoCL graphs are for conformance, not speed.
package opencl

// ExecBytesPerNode is the device memory an instantiated graph is charged per
// recorded command, outside any pool: its kernel object and arguments. (It
// is declared here, without build constraints, so that tests name it on
// every platform.)
const ExecBytesPerNode = 1024

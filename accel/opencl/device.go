//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	_ "embed"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// maxLocal is the work-group size every launch uses (less where the device or
// a kernel allows less): one size per kernel, so a JIT compiler such as PoCL's
// generates each kernel once.
const maxLocal = 64

//go:embed kernels.cl
var kernelSource string

func init() { accel.Register(backend{}) }

type backend struct{}

func (backend) Name() string { return "opencl" }

// Probe loads the OpenCL library and unloads it again; it initialises no
// platform.
func (backend) Probe() error { return probeLibrary() }

// Devices lists every device of every platform; ordinals count across
// platforms in the order the ICD loader lists them.
func (backend) Devices() ([]accel.DeviceInfo, error) {
	l, err := loadLibrary()
	if err != nil {
		return nil, err
	}
	refs, err := l.enumerate()
	if err != nil {
		return nil, err
	}
	out := make([]accel.DeviceInfo, len(refs))
	for i, r := range refs {
		out[i] = deviceInfo(l, r, i)
	}
	return out, nil
}

func (backend) Open(ordinal int, opts accel.Options) (accel.Device, error) {
	return Open(ordinal, opts)
}

func deviceInfo(l *lib, r devRef, ord int) accel.DeviceInfo {
	ext := l.deviceString(r.device, clDeviceExtensions)
	cb := "no cl_khr_command_buffer"
	if hasExtension(ext, "cl_khr_command_buffer") {
		cb = "cl_khr_command_buffer"
		if hasExtension(ext, "cl_khr_command_buffer_mutable_dispatch") {
			cb += " with mutable dispatch"
		}
	}
	return accel.DeviceInfo{
		Backend: "opencl",
		Ordinal: ord,
		Name:    l.deviceString(r.device, clDeviceName),
		Vendor:  l.deviceString(r.device, clDeviceVendor),
		Detail: fmt.Sprintf("%s; %s; driver %s; %s; %s",
			l.platformString(r.platform, clPlatformName), l.deviceString(r.device, clDeviceVersion),
			l.deviceString(r.device, clDriverVersion), cb, l.path),
	}
}

// shared is what every Device opened on one OpenCL device shares, created at
// the first Open and kept for the life of the process (as a CUDA primary
// context is): the context and the built program.
type shared struct {
	ctx   uintptr
	prog  uintptr
	local uintptr
	err   error
}

var (
	sharedMu sync.Mutex
	sharedBy = map[uintptr]*shared{}
)

func getShared(l *lib, r devRef, opts string) (*shared, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sh, ok := sharedBy[r.device]; ok {
		return sh, sh.err
	}
	sh := &shared{}
	sh.err = sh.init(l, r, opts)
	if sh.err != nil {
		if sh.prog != 0 {
			call(l.releaseProgram, sh.prog)
			sh.prog = 0
		}
		if sh.ctx != 0 {
			call(l.releaseContext, sh.ctx)
			sh.ctx = 0
		}
	}
	sharedBy[r.device] = sh
	return sh, sh.err
}

func (sh *shared) init(l *lib, r devRef, opts string) error {
	props := []uintptr{clContextPlatform, r.platform, 0}
	dev := r.device
	var code int32
	sh.ctx = call(l.createContext, uintptr(unsafe.Pointer(&props[0])), 1, uintptr(unsafe.Pointer(&dev)), 0, 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateContext", code); err != nil {
		return err
	}
	// The source array holds a pointer to Go memory: pin it while C reads it.
	src := []byte(kernelSource)
	var pin runtime.Pinner
	pin.Pin(&src[0])
	defer pin.Unpin()
	strs := []uintptr{uintptr(unsafe.Pointer(&src[0]))}
	lens := []uintptr{uintptr(len(src))}
	sh.prog = call(l.createProgramWithSource, sh.ctx, 1, uintptr(unsafe.Pointer(&strs[0])), uintptr(unsafe.Pointer(&lens[0])), uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateProgramWithSource", code); err != nil {
		return err
	}
	copts := append([]byte(opts), 0)
	// No callback and no user data: PoCL rejects user data without a callback.
	code = callErr(l.buildProgram, sh.prog, 1, uintptr(unsafe.Pointer(&dev)), uintptr(unsafe.Pointer(&copts[0])), 0, 0)
	if code != clSuccess {
		log := buildLog(l, sh.prog, dev)
		return fmt.Errorf("opencl: building the kernels (options %q): %w\n%s", opts, &clError{"clBuildProgram", code}, log)
	}
	// One work-group size for every kernel.
	local := uint64(maxLocal)
	if v, err := l.deviceUint(dev, clDeviceMaxWorkGroupSize); err == nil && v > 0 && v < local {
		local = v
	}
	for _, name := range kernelNames {
		cname := cbytes(name)
		k := call(l.createKernel, sh.prog, uintptr(unsafe.Pointer(&cname[0])), uintptr(unsafe.Pointer(&code)))
		if err := check("clCreateKernel("+name+")", code); err != nil {
			return err
		}
		var wg uintptr
		if callErr(l.getKernelWorkGroupInfo, k, dev, clKernelWorkGroupSize, unsafe.Sizeof(wg), uintptr(unsafe.Pointer(&wg)), 0) == clSuccess && wg > 0 && uint64(wg) < local {
			local = uint64(wg)
		}
		call(l.releaseKernel, k)
	}
	p := uint64(1)
	for p*2 <= local {
		p *= 2
	}
	sh.local = uintptr(p)
	return nil
}

func buildLog(l *lib, prog, dev uintptr) string {
	var n uintptr
	if callErr(l.getProgramBuildInfo, prog, dev, clProgramBuildLog, 0, 0, uintptr(unsafe.Pointer(&n))) != clSuccess || n == 0 {
		return ""
	}
	b := make([]byte, n)
	if callErr(l.getProgramBuildInfo, prog, dev, clProgramBuildLog, n, uintptr(unsafe.Pointer(&b[0])), 0) != clSuccess {
		return ""
	}
	return cString(b)
}

// cbytes is a NUL-terminated copy of s for C to read.
func cbytes(s string) []byte { return append([]byte(s), 0) }

// cbFuncs are the cl_khr_command_buffer entry points (all 0 when the device
// does not offer the extension).
type cbFuncs struct {
	create   uintptr
	ndrange  uintptr
	finalize uintptr
	enqueue  uintptr
	release  uintptr
}

// deviceMemory is alloc.DeviceMemory under a name that keeps the embedded
// field unexported.
type deviceMemory = alloc.DeviceMemory

// Device is one OpenCL device.
type Device struct {
	*deviceMemory // MemInfo, Allocator, Caching, Alloc, Free, NewPool
	l             *lib
	ref           devRef
	sh            *shared
	info          accel.DeviceInfo
	capab         accel.Capability
	budget        *alloc.Budget // segments + executables
	maxAlloc      int64
	cb            cbFuncs
	qprops        uint64  // properties every queue is created with
	aux           uintptr // queue for maps and command-buffer recording
	// noSubstitute: the driver refused to run a command buffer on another
	// (compatible) queue than the one it was recorded on; replays then run
	// on aux, ordered with the stream by events.
	noSubstitute atomic.Bool
	// noSimultaneous: the driver rejected CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR
	// (later revisions of the extension dropped the flag).
	noSimultaneous atomic.Bool

	mu       sync.Mutex
	streams  map[*stream]struct{}
	segs     map[*clMem]struct{}
	ropeFreq map[ropeKey]uintptr
	nextID   int64
	closed   bool
}

type ropeKey struct {
	hd    int
	theta uint32
}

// Open opens OpenCL device ordinal (counted across platforms). opts.MemoryLimit
// caps the device memory used (default: the device's global memory size).
func Open(ordinal int, opts accel.Options) (*Device, error) {
	l, err := loadLibrary()
	if err != nil {
		return nil, err
	}
	refs, err := l.enumerate()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(refs) {
		return nil, fmt.Errorf("opencl: no device %d (there are %d: 0..%d)", ordinal, len(refs), len(refs)-1)
	}
	r := refs[ordinal]
	d := &Device{l: l, ref: r, info: deviceInfo(l, r, ordinal), streams: map[*stream]struct{}{},
		segs: map[*clMem]struct{}{}, ropeFreq: map[ropeKey]uintptr{}}
	if little, err := l.deviceUint(r.device, clDeviceEndianLittle); err == nil && little == 0 {
		return nil, fmt.Errorf("opencl: device %d (%s) is big-endian; reprise needs a little-endian device: %w", ordinal, d.info.Name, accel.ErrUnsupported)
	}
	global, err := l.deviceUint(r.device, clDeviceGlobalMemSize)
	if err != nil {
		return nil, err
	}
	maxAlloc, err := l.deviceUint(r.device, clDeviceMaxMemAllocSize)
	if err != nil || maxAlloc == 0 {
		maxAlloc = global
	}
	units, _ := l.deviceUint(r.device, clDeviceMaxComputeUnits)
	avail, _ := l.deviceUint(r.device, clDeviceAvailable)
	compiler, _ := l.deviceUint(r.device, clDeviceCompilerAvailable)
	ext := l.deviceString(r.device, clDeviceExtensions)
	if avail == 0 || compiler == 0 {
		return nil, fmt.Errorf("opencl: device %d (%s) is not available or has no compiler: %w", ordinal, d.info.Name, accel.ErrBackendUnavailable)
	}
	buildOpts := ""
	if fp, err := l.deviceUint(r.device, clDeviceSingleFPConfig); err == nil && fp&clFPCorrectlyRoundedDivSqr != 0 {
		buildOpts = "-cl-fp32-correctly-rounded-divide-sqrt"
	}
	capacity := int64(global)
	if opts.MemoryLimit > 0 {
		capacity = opts.MemoryLimit
	}
	if d.budget, err = alloc.NewBudget("opencl", capacity); err != nil {
		return nil, err
	}
	d.maxAlloc = int64(maxAlloc)
	sh, err := getShared(l, r, buildOpts)
	if err != nil {
		return nil, err
	}
	d.sh = sh

	graphs := false
	if hasExtension(ext, "cl_khr_command_buffer") {
		d.cb = cbFuncs{
			create:   l.extension(r.platform, "clCreateCommandBufferKHR"),
			ndrange:  l.extension(r.platform, "clCommandNDRangeKernelKHR"),
			finalize: l.extension(r.platform, "clFinalizeCommandBufferKHR"),
			enqueue:  l.extension(r.platform, "clEnqueueCommandBufferKHR"),
			release:  l.extension(r.platform, "clReleaseCommandBufferKHR"),
		}
		graphs = d.cb.create != 0 && d.cb.ndrange != 0 && d.cb.finalize != 0 && d.cb.enqueue != 0 && d.cb.release != 0
		if graphs {
			if v, err := l.deviceUint(r.device, clDeviceCommandBufferRequiredQueueProps); err == nil {
				d.qprops = v
			}
		} else {
			d.cb = cbFuncs{}
		}
	}
	d.capab = accel.Capability{
		Available:     true,
		PinnedMemory:  true,
		GraphCapture:  graphs,
		GraphUpdate:   graphs && hasExtension(ext, "cl_khr_command_buffer_mutable_dispatch"),
		MemoryTotal:   capacity,
		Deterministic: true,
		ComputeUnits:  int(units),
		KVCacheF16:    true, // k_kv_write_f16 and k_attention_f16, core OpenCL C
	}
	if d.aux, err = d.newQueue(); err != nil {
		return nil, err
	}
	d.deviceMemory = alloc.NewDeviceMemory(d.budget, source{d}, d.check)
	return d, nil
}

// newQueue makes an in-order command queue.
func (d *Device) newQueue() (uintptr, error) {
	l := d.l
	var code int32
	var q uintptr
	if l.createCommandQueueWithProperties != 0 {
		var pp uintptr
		props := []uint64{clQueueProperties, d.qprops, 0}
		if d.qprops != 0 {
			pp = uintptr(unsafe.Pointer(&props[0]))
		}
		q = call(l.createCommandQueueWithProperties, d.sh.ctx, d.ref.device, pp, uintptr(unsafe.Pointer(&code)))
	} else {
		q = call(l.createCommandQueue, d.sh.ctx, d.ref.device, uintptr(d.qprops), uintptr(unsafe.Pointer(&code)))
	}
	if err := check("clCreateCommandQueue", code); err != nil {
		return 0, err
	}
	return q, nil
}

// Info names the device.
func (d *Device) Info() accel.DeviceInfo { return d.info }

// Capability comes from the device's own answers (extensions, memory, compute
// units), asked once at Open.
func (d *Device) Capability() accel.Capability { return d.capab }

func (d *Device) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("opencl: device: %w", accel.ErrClosed)
	}
	return nil
}

// NewEvent makes an event.
func (d *Device) NewEvent() (accel.Event, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return &event{d: d}, nil
}

// Synchronize waits for every stream.
func (d *Device) Synchronize() error {
	d.mu.Lock()
	ss := slices.Collect(maps.Keys(d.streams))
	d.mu.Unlock()
	var first error
	for _, s := range ss {
		if err := s.finish(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close finishes and releases every stream, the device memory and the
// queues. The context and program stay for the next Open of the same device.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	ss := slices.Collect(maps.Keys(d.streams))
	d.mu.Unlock()
	var first error
	for _, s := range ss {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	if err := check("clFinish", callErr(d.l.finish, d.aux)); err != nil && first == nil {
		first = err
	}
	d.mu.Lock()
	for m := range d.segs {
		call(d.l.releaseMemObject, m.h)
		d.budget.Uncharge(m.size)
		m.h = 0
	}
	clear(d.segs)
	for k, h := range d.ropeFreq {
		call(d.l.releaseMemObject, h)
		delete(d.ropeFreq, k)
	}
	d.mu.Unlock()
	call(d.l.releaseCommandQueue, d.aux)
	return first
}

// rope returns the device buffer of RoPE frequencies for (hd, theta),
// computed on the host exactly as accel.RoPEFreq does and kept until Close.
func (d *Device) rope(hd int, theta float32) (uintptr, error) {
	key := ropeKey{hd, math.Float32bits(theta)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if h, ok := d.ropeFreq[key]; ok {
		return h, nil
	}
	f := make([]float32, hd/2)
	for i := 0; i < hd; i += 2 {
		f[i/2] = accel.RoPEFreq(i, hd, theta)
	}
	var code int32
	h := call(d.l.createBuffer, d.sh.ctx, clMemReadOnly|clMemCopyHostPtr, uintptr(4*len(f)), uintptr(unsafe.Pointer(&f[0])), uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateBuffer", code); err != nil {
		return 0, err
	}
	d.ropeFreq[key] = h
	return h, nil
}

var _ accel.Device = (*Device)(nil)

//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// cublasWorkspaceBytes is the workspace each stream's cuBLAS handle is given
// (NVIDIA's advice for Hopper), so that cuBLAS never allocates while a
// stream captures. It is device memory outside the capacity accounting.
const cublasWorkspaceBytes = 32 << 20

func init() { accel.Register(backend{}) }

type backend struct{}

func (backend) Name() string { return "cuda" }

// Probe dlopens libcuda and closes it again; it initialises nothing (no
// cuInit).
func (backend) Probe() error { return probeDriver() }

// Devices calls cuInit and lists the devices; it opens none.
func (backend) Devices() ([]accel.DeviceInfo, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	n, err := drv.count()
	if err != nil {
		return nil, err
	}
	out := make([]accel.DeviceInfo, 0, n)
	for i := 0; i < n; i++ {
		p, err := drv.props(i)
		if err != nil {
			return nil, err
		}
		out = append(out, p.info(drv, i, ""))
	}
	return out, nil
}

func (backend) Open(ordinal int, opts accel.Options) (accel.Device, error) {
	return Open(ordinal, opts)
}

// devProps is what the driver says about a device, without a context.
type devProps struct {
	dev          int32 // CUdevice
	name         string
	total        int64
	major, minor int
	sms          int
}

func (drv *driver) count() (int, error) {
	var n int32
	if err := drv.err("cuDeviceGetCount", call32(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, fmt.Errorf("%w: %w", err, accel.ErrBackendUnavailable)
	}
	if n == 0 {
		return 0, fmt.Errorf("cuda: the driver (%s) reports no CUDA device: %w", drv.path, accel.ErrBackendUnavailable)
	}
	return int(n), nil
}

func (drv *driver) props(ord int) (devProps, error) {
	var p devProps
	if err := drv.err("cuDeviceGet", call32(drv.cuDeviceGet, uintptr(unsafe.Pointer(&p.dev)), uintptr(ord))); err != nil {
		return p, err
	}
	var name [256]byte
	if err := drv.err("cuDeviceGetName", call32(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(p.dev))); err != nil {
		return p, err
	}
	p.name = cString(name[:])
	var total uint64
	if err := drv.err("cuDeviceTotalMem_v2", call32(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(p.dev))); err != nil {
		return p, err
	}
	p.total = int64(total)
	attr := func(a int) (int, error) {
		var v int32
		err := drv.err("cuDeviceGetAttribute", call32(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(p.dev)))
		return int(v), err
	}
	var err error
	if p.major, err = attr(cuDeviceAttrComputeMajor); err != nil {
		return p, err
	}
	if p.minor, err = attr(cuDeviceAttrComputeMinor); err != nil {
		return p, err
	}
	if p.sms, err = attr(cuDeviceAttrMultiprocessorCount); err != nil {
		return p, err
	}
	return p, nil
}

func (p devProps) info(drv *driver, ord int, extra string) accel.DeviceInfo {
	d := fmt.Sprintf("compute capability %d.%d, %d SMs, %.1f GiB; CUDA %s driver (%s)",
		p.major, p.minor, p.sms, float64(p.total)/(1<<30), versionString(drv.version), drv.path)
	if extra != "" {
		d += "; " + extra
	}
	return accel.DeviceInfo{Backend: "cuda", Ordinal: ord, Name: p.name, Vendor: "NVIDIA", Detail: d}
}

// deviceMemory is alloc.DeviceMemory under a name that keeps the embedded
// field unexported.
type deviceMemory = alloc.DeviceMemory

// Device is one CUDA device, through its primary context.
type Device struct {
	*deviceMemory // Allocator, Caching, Alloc, Free, NewPool
	drv           *driver
	props         devProps
	ctx           uintptr // the primary context, retained until Close
	mod           uintptr
	funcs         [numKernels]uintptr
	image         kernelImage
	blas          *cublasLib // nil: MatMul uses k_matmul_* only
	blasNote      string     // why cuBLAS is not used, or which one is
	info          accel.DeviceInfo
	capab         accel.Capability
	budget        *alloc.Budget // segments + executables
	closedA       atomic.Bool

	mu       sync.Mutex
	streams  map[*stream]struct{}
	segs     map[*devMem]struct{}
	hosts    map[*hostMem]struct{}
	events   map[*eventHandle]struct{}
	graphs   map[*graph]struct{}
	execs    map[*exec]struct{}
	deferred []*devMem // segments freed while a stream captured
	dhosts   []*hostMem
	// blasKept are closed streams' cuBLAS handles and workspaces: graphs
	// captured on a stream keep using its workspace, and cublasDestroy
	// synchronises the device (illegal while another stream captures), so
	// both live until the device closes, after its executables.
	blasKept  []blasState
	capturing int // streams capturing now
	nextID    int64
	closed    bool
}

// Open opens CUDA device ordinal through its primary context, compiles the
// kernels (once per process and architecture) and loads cuBLAS where
// present. opts.MemoryLimit caps the device memory used (default: the
// device's total memory).
func Open(ordinal int, opts accel.Options) (*Device, error) {
	drv, err := loadDriver()
	if err != nil {
		return nil, err
	}
	n, err := drv.count()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: no device %d (there are %d: 0..%d)", ordinal, n, n-1)
	}
	p, err := drv.props(ordinal)
	if err != nil {
		return nil, err
	}
	if p.major < 6 {
		return nil, fmt.Errorf("cuda: device %d (%s) has compute capability %d.%d; reprise needs 6.0 or later: %w", ordinal, p.name, p.major, p.minor, accel.ErrUnsupported)
	}
	d := &Device{drv: drv, props: p, streams: map[*stream]struct{}{}, segs: map[*devMem]struct{}{},
		hosts: map[*hostMem]struct{}{}, events: map[*eventHandle]struct{}{}, graphs: map[*graph]struct{}{}, execs: map[*exec]struct{}{}}
	capacity := p.total
	if opts.MemoryLimit > 0 {
		capacity = opts.MemoryLimit
	}
	if d.budget, err = alloc.NewBudget("cuda", capacity); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := drv.err("cuDevicePrimaryCtxRetain", call32(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(p.dev))); err != nil {
		return nil, fmt.Errorf("cuda: device %d (%s): %w", ordinal, p.name, err)
	}
	if err := drv.err("cuCtxSetCurrent", call32(drv.cuCtxSetCurrent, d.ctx)); err != nil {
		call32(drv.cuDevicePrimaryCtxRelease, uintptr(p.dev))
		return nil, err
	}
	if err := d.loadKernels(); err != nil {
		call32(drv.cuDevicePrimaryCtxRelease, uintptr(p.dev))
		return nil, fmt.Errorf("cuda: device %d (%s): %w", ordinal, p.name, err)
	}
	if b, berr := loadCUBLAS(drv); berr == nil {
		d.blas = b
		d.blasNote = "cuBLAS " + b.path + " for float32 matrix products of at least 65536 weights"
	} else {
		d.blasNote = "no cuBLAS, reprise's matmul kernel for every MatMul (" + firstLine(berr.Error()) + ")"
	}
	d.capab = accel.Capability{
		Available:     true,
		PinnedMemory:  true,
		GraphCapture:  true,
		GraphUpdate:   true,
		MemoryTotal:   capacity,
		Deterministic: false,
		ComputeUnits:  p.sms,
	}
	kind := "CUBIN " + d.image.target
	if d.image.ptx {
		kind = "PTX " + d.image.target + " (driver JIT)"
	}
	d.info = p.info(drv, ordinal, fmt.Sprintf("kernels: %s by %s", kind, d.image.nvrtc))
	d.deviceMemory = alloc.NewDeviceMemory(d.budget, source{d}, d.check)
	return d, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// loadKernels loads kernels.cu for the device: the cached image of an
// earlier Open, or a fresh NVRTC build, trying the device's CUBIN, then its
// PTX. The calling thread has the context current.
func (d *Device) loadKernels() error {
	cc := d.props.major*10 + d.props.minor
	if img, ok := cachedImage(cc); ok {
		if err := d.loadModule(img); err == nil {
			return nil
		}
	}
	var why []string
	var targets []string
	nv, err := loadNVRTC(d.drv)
	if err != nil {
		why = append(why, "the kernels are compiled at run time and need NVRTC: "+err.Error())
	} else if targets, err = compileTargets(cc, nv.supportedArchs()); err != nil {
		why = append(why, err.Error())
	}
	for _, tgt := range targets {
		img, err := nv.compile(kernelSource, tgt)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		if err := d.loadModule(img); err != nil {
			why = append(why, fmt.Sprintf("loading the %s image built by %s: %v", tgt, img.nvrtc, err))
			continue
		}
		cacheImage(cc, img)
		return nil
	}
	// The embedded PTX, compiled ahead of time, while it matches kernels.cu.
	if cc >= fallbackArch {
		if ptx, by, ok := fallbackImage(); !ok {
			why = append(why, by)
		} else {
			img := kernelImage{image: ptx, target: fmt.Sprintf("compute_%d", fallbackArch), ptx: true,
				nvrtc: "the embedded fallback (" + by + "), since NVRTC failed: " + firstLine(strings.Join(why, "; "))}
			if err := d.loadModule(img); err == nil {
				cacheImage(cc, img)
				return nil
			} else {
				why = append(why, "loading the embedded fallback PTX: "+err.Error())
			}
		}
	}
	return fmt.Errorf("cuda: could not build the kernels for compute capability %d.%d (tried %s, then the embedded PTX):\n%s",
		d.props.major, d.props.minor, strings.Join(targets, ", "), strings.Join(why, "\n"))
}

func (d *Device) loadModule(img kernelImage) error {
	d.enter() // Open holds its thread already; a test may call this from any
	defer d.leave()
	drv := d.drv
	var mod uintptr
	if err := drv.err("cuModuleLoadData", call32(drv.cuModuleLoadData, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&img.image[0])))); err != nil {
		return err
	}
	for k, sp := range kernelSpecs {
		name := cbytes(sp.name)
		var f uintptr
		if err := drv.err("cuModuleGetFunction("+sp.name+")", call32(drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), mod, uintptr(unsafe.Pointer(&name[0])))); err != nil {
			call32(drv.cuModuleUnload, mod)
			return err
		}
		d.funcs[k] = f
	}
	d.mod, d.image = mod, img
	return nil
}

// enter locks the calling goroutine to its OS thread and makes the device's
// context current there; leave unlocks. Every driver call goes between the
// two (see doc.go, Threading). The locks nest: a capture keeps its thread
// locked from BeginCapture to EndCapture.
func (d *Device) enter() {
	runtime.LockOSThread()
	var cur uintptr
	call32(d.drv.cuCtxGetCurrent, uintptr(unsafe.Pointer(&cur)))
	if cur != d.ctx {
		call32(d.drv.cuCtxSetCurrent, d.ctx)
	}
}

func (d *Device) leave() { runtime.UnlockOSThread() }

// relaxed switches the calling thread to CU_STREAM_CAPTURE_MODE_RELAXED for a
// call stream capture would refuse on a capturing thread (cuMemAlloc,
// cuMemGetInfo, cuMemHostAlloc); restore puts the previous mode back.
func (d *Device) relaxed() *uint32 {
	mode := new(uint32)
	*mode = cuCaptureModeRelaxed
	call32(d.drv.cuThreadExchangeStreamCaptureMode, uintptr(unsafe.Pointer(mode)))
	return mode
}

func (d *Device) restore(prev *uint32) {
	call32(d.drv.cuThreadExchangeStreamCaptureMode, uintptr(unsafe.Pointer(prev)))
}

// Info names the device; its Detail says how the kernels were built and
// whether MatMul uses cuBLAS.
func (d *Device) Info() accel.DeviceInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	info := d.info
	info.Detail += "; " + d.blasNote
	return info
}

// Capability comes from the device's answers at Open.
func (d *Device) Capability() accel.Capability { return d.capab }

// MemInfo is the capacity less every segment and executable held, but never
// more than the driver's own free memory.
func (d *Device) MemInfo() accel.MemInfo {
	mi := d.budget.MemInfo()
	if real, ok := d.realFree(); ok && real < mi.Free {
		mi.Free = real
	}
	mi.Free = max(mi.Free, 0)
	return mi
}

// realFree is cuMemGetInfo's free memory.
func (d *Device) realFree() (int64, bool) {
	if d.closedA.Load() {
		return 0, false
	}
	d.enter()
	defer d.leave()
	prev := d.relaxed()
	defer d.restore(prev)
	var free, total uint64
	if call32(d.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))) != cuSuccess {
		return 0, false
	}
	return int64(free), true
}

func (d *Device) check() error {
	if d.closedA.Load() {
		return fmt.Errorf("cuda: device: %w", accel.ErrClosed)
	}
	return nil
}

// Synchronize waits for every stream that is not capturing (a capturing
// stream has nothing to run; synchronising the whole context would
// invalidate its capture).
func (d *Device) Synchronize() error {
	d.mu.Lock()
	ss := slices.Collect(maps.Keys(d.streams))
	d.mu.Unlock()
	var first error
	for _, s := range ss {
		if s.Capturing() {
			continue
		}
		if err := s.finish(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// captureStarted and captureEnded count capturing streams; segments and
// pinned memory freed meanwhile are released when the last capture ends,
// since cuMemFree and cuMemFreeHost may synchronise the device.
func (d *Device) captureStarted() {
	d.mu.Lock()
	d.capturing++
	d.mu.Unlock()
}

func (d *Device) captureEnded() {
	d.mu.Lock()
	d.capturing--
	var segs []*devMem
	var hosts []*hostMem
	if d.capturing == 0 && !d.closed {
		segs, hosts = d.deferred, d.dhosts
		d.deferred, d.dhosts = nil, nil
	}
	d.mu.Unlock()
	for _, m := range segs {
		d.freeSegment(m)
	}
	for _, h := range hosts {
		d.freeHost(h)
	}
}

// Close finishes and releases every stream, event, graph, executable,
// segment and pinned buffer of the device, unloads its kernels and releases
// the primary context.
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
	d.closedA.Store(true)
	drv := d.drv
	d.enter()
	if err := drv.err("cuCtxSynchronize", call32(drv.cuCtxSynchronize)); err != nil && first == nil {
		first = err
	}
	d.mu.Lock()
	for e := range d.execs {
		e.mu.Lock()
		if e.h != 0 {
			call32(drv.cuGraphExecDestroy, e.h)
			e.h = 0
		}
		e.mu.Unlock()
	}
	clear(d.execs)
	for g := range d.graphs {
		if g.h != 0 {
			call32(drv.cuGraphDestroy, g.h)
			g.h = 0
		}
	}
	clear(d.graphs)
	for eh := range d.events {
		call32(drv.cuEventDestroy, eh.h)
	}
	clear(d.events)
	segs := append(d.deferred, slices.Collect(maps.Keys(d.segs))...)
	d.deferred = nil
	clear(d.segs)
	hosts := append(d.dhosts, slices.Collect(maps.Keys(d.hosts))...)
	d.dhosts = nil
	clear(d.hosts)
	d.mu.Unlock()
	for _, m := range segs {
		call32(drv.cuMemFree, uintptr(m.ptr))
		d.budget.Uncharge(m.size)
	}
	for _, h := range hosts {
		h.b.Store(nil)
		call32(drv.cuMemFreeHost, h.ptr)
	}
	for _, b := range d.blasKept {
		b.release(d)
	}
	d.blasKept = nil
	if d.mod != 0 {
		call32(drv.cuModuleUnload, d.mod)
		d.mod = 0
	}
	d.leave()
	call32(drv.cuDevicePrimaryCtxRelease, uintptr(d.props.dev))
	return first
}

// ---------------------------------------------------------------------------
// Events.

// eventHandle is a CUevent. The device keeps the handles (not the events),
// so an event nobody references is collected and its handle destroyed, and
// Close destroys the rest.
type eventHandle struct{ h uintptr }

type event struct {
	d  *Device
	eh *eventHandle
}

// NewEvent makes an event (cuEventCreate with timing disabled).
func (d *Device) NewEvent() (accel.Event, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	d.enter()
	var h uintptr
	err := d.drv.err("cuEventCreate", call32(d.drv.cuEventCreate, uintptr(unsafe.Pointer(&h)), cuEventDisableTiming))
	d.leave()
	if err != nil {
		return nil, err
	}
	eh := &eventHandle{h: h}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.enter()
		call32(d.drv.cuEventDestroy, h)
		d.leave()
		return nil, fmt.Errorf("cuda: device: %w", accel.ErrClosed)
	}
	d.events[eh] = struct{}{}
	d.mu.Unlock()
	ev := &event{d: d, eh: eh}
	runtime.AddCleanup(ev, d.destroyEvent, eh)
	return ev, nil
}

func (d *Device) destroyEvent(eh *eventHandle) {
	d.mu.Lock()
	_, live := d.events[eh]
	delete(d.events, eh)
	d.mu.Unlock()
	if !live || d.closedA.Load() {
		return
	}
	d.enter()
	call32(d.drv.cuEventDestroy, eh.h)
	d.leave()
}

// Query reports whether the work recorded before the event has run (true if
// never recorded, and true on an error, which Synchronize reports).
func (e *event) Query() bool {
	if e.d.closedA.Load() {
		return true
	}
	e.d.enter()
	code := call32(e.d.drv.cuEventQuery, e.eh.h)
	e.d.leave()
	runtime.KeepAlive(e)
	return code != cuErrorNotReady
}

// Synchronize blocks until the recorded work has run.
func (e *event) Synchronize() error {
	if e.d.closedA.Load() {
		return nil
	}
	e.d.enter()
	err := e.d.drv.err("cuEventSynchronize", call32(e.d.drv.cuEventSynchronize, e.eh.h))
	e.d.leave()
	runtime.KeepAlive(e)
	return err
}

var _ accel.Device = (*Device)(nil)

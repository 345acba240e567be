//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/reprise-ml/reprise/accel"
)

// EnvLibraryPath is a colon-separated list of directories searched first for
// libcuda, NVRTC and cuBLAS, before the default search (see doc.go).
const EnvLibraryPath = "REPRISE_CUDA_LIBRARY_PATH"

// EnvCUBLAS set to 0, off or false keeps cuBLAS out: every MatMul then runs
// reprise's own kernel.
const EnvCUBLAS = "REPRISE_CUDA_CUBLAS"

// libDirs are the directories searched after EnvLibraryPath and the dynamic
// loader's own search, in order. Globs are expanded, newest version first.
var libDirs = []string{
	"/usr/local/nvidia/lib64",
	"/usr/local/nvidia/lib",
	"/usr/local/cuda/lib64",
	"/usr/local/cuda/targets/x86_64-linux/lib",
	"/usr/local/cuda/targets/sbsa-linux/lib",
	"/usr/local/cuda-*/lib64",
	"/usr/local/cuda-*/targets/x86_64-linux/lib",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib64",
	"/usr/lib/wsl/lib",
	"/opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib",
	"/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
	"/usr/local/lib/python3*/site-packages/nvidia/*/lib",
	"/usr/lib/python3/dist-packages/nvidia/*/lib",
}

// envDirs are the directories of EnvLibraryPath, in order.
func envDirs() []string {
	var out []string
	for _, d := range strings.Split(os.Getenv(EnvLibraryPath), ":") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// searchDirs expands libDirs and LD_LIBRARY_PATH into existing directories,
// without duplicates, in search order.
func searchDirs() []string {
	seen := map[string]bool{}
	var out []string
	add := func(d string) {
		if d == "" || seen[d] {
			return
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return
		}
		seen[d] = true
		out = append(out, d)
	}
	for _, d := range strings.Split(os.Getenv("LD_LIBRARY_PATH"), ":") {
		add(strings.TrimSpace(d))
	}
	for _, pat := range libDirs {
		if !strings.ContainsAny(pat, "*?[") {
			add(pat)
			continue
		}
		ms, _ := filepath.Glob(pat)
		sort.Sort(sort.Reverse(byVersion(ms)))
		for _, m := range ms {
			add(m)
		}
	}
	return out
}

// byVersion orders file names by the numbers in them (libnvrtc.so.12 before
// libnvrtc.so.13, cuda-12.4 before cuda-12.10), then by name.
type byVersion []string

func (b byVersion) Len() int      { return len(b) }
func (b byVersion) Swap(i, j int) { b[i], b[j] = b[j], b[i] }
func (b byVersion) Less(i, j int) bool {
	x, y := versionOf(b[i]), versionOf(b[j])
	for k := 0; k < len(x) && k < len(y); k++ {
		if x[k] != y[k] {
			return x[k] < y[k]
		}
	}
	if len(x) != len(y) {
		return len(x) < len(y)
	}
	return b[i] < b[j]
}

// versionOf extracts the decimal numbers of a name, in order.
func versionOf(s string) []int {
	var out []int
	for i := 0; i < len(s); {
		if s[i] < '0' || s[i] > '9' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		n, _ := strconv.Atoi(s[i:j])
		out = append(out, n)
		i = j
	}
	return out
}

// sonameMajor is the major version in a soname such as libnvrtc.so.12.4
// (12), or -1.
func sonameMajor(name string) int {
	_, v, ok := strings.Cut(filepath.Base(name), ".so.")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		return -1
	}
	return n
}

// libSpec describes one library to find: its soname stem ("libnvrtc"), the
// versioned sonames to try through the dynamic loader, and a filter for the
// files found in the search directories.
type libSpec struct {
	what     string   // for messages: "the CUDA driver (libcuda)"
	stem     string   // libcuda, libnvrtc, libcublas
	sonames  []string // bare names the dynamic loader searches
	globDirs bool     // also glob stem.so* in searchDirs
	reject   func(path string) string
	hint     string // what to install, for the error
}

// candidates is the ordered list of paths tried for spec: every
// EnvLibraryPath directory first, then the bare sonames (the dynamic
// loader's own search: LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib), then
// the files found in searchDirs.
func (sp libSpec) candidates() []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, d := range envDirs() {
		found := false
		if sp.globDirs {
			ms, _ := filepath.Glob(filepath.Join(d, sp.stem+".so*"))
			sort.Sort(sort.Reverse(byVersion(ms)))
			for _, m := range ms {
				if sp.accept(m) {
					add(m)
					found = true
				}
			}
		}
		if !found {
			for _, n := range sp.sonames {
				add(filepath.Join(d, n))
			}
		}
	}
	for _, n := range sp.sonames {
		add(n)
	}
	if sp.globDirs {
		for _, d := range searchDirs() {
			ms, _ := filepath.Glob(filepath.Join(d, sp.stem+".so*"))
			sort.Sort(sort.Reverse(byVersion(ms)))
			for _, m := range ms {
				if sp.accept(m) {
					add(m)
				}
			}
		}
	}
	return out
}

func (sp libSpec) accept(path string) bool {
	base := filepath.Base(path)
	// libnvrtc-builtins.so, libcublasLt.so: other libraries sharing the stem.
	rest := strings.TrimPrefix(base, sp.stem)
	if !strings.HasPrefix(rest, ".so") {
		return false
	}
	if strings.Contains(path, "/stubs/") {
		return false
	}
	if sp.reject != nil && sp.reject(path) != "" {
		return false
	}
	return true
}

// openFirst dlopens the first candidate that loads. accept, when set, is
// asked about each library that loaded and may refuse it with a reason (the
// handle is then closed and the search goes on). The error wraps
// accel.ErrBackendUnavailable and names every path searched and why each
// failed.
func openFirst(sp libSpec, cands []string, flags int, accept func(path string, h uintptr) string) (string, uintptr, error) {
	var why []string
	for _, p := range cands {
		if strings.Contains(p, "/") {
			if _, err := os.Stat(p); err != nil {
				why = append(why, p+" (no such file)")
				continue
			}
		}
		h, err := purego.Dlopen(p, flags)
		if err != nil {
			why = append(why, fmt.Sprintf("%s (%v)", p, err))
			continue
		}
		if accept != nil {
			if reason := accept(p, h); reason != "" {
				_ = purego.Dlclose(h)
				why = append(why, fmt.Sprintf("%s (%s)", p, reason))
				continue
			}
		}
		return p, h, nil
	}
	src := "no " + EnvLibraryPath + " set"
	if v := os.Getenv(EnvLibraryPath); v != "" {
		src = fmt.Sprintf("%s=%q searched first", EnvLibraryPath, v)
	}
	return "", 0, fmt.Errorf("cuda: %s not found; searched %s; %s; %s: %w",
		sp.what, strings.Join(why, ", "), src, sp.hint, accel.ErrBackendUnavailable)
}

// preloadSibling dlopens, RTLD_GLOBAL, the library stem.so.<major> (or the
// newest stem.so.*) beside path, so that path's own dependency on it resolves
// even where the directory is not on the loader's search path
// (libcublasLt beside libcublas, libnvrtc-builtins beside libnvrtc). It is
// best effort: nothing is reported.
func preloadSibling(path, stem string, major int) {
	if !strings.Contains(path, "/") {
		return
	}
	dir := filepath.Dir(path)
	ms, _ := filepath.Glob(filepath.Join(dir, stem+".so*"))
	sort.Sort(sort.Reverse(byVersion(ms)))
	for _, m := range ms {
		if major >= 0 && sonameMajor(m) != major && !strings.Contains(filepath.Base(m), fmt.Sprintf(".so.%d", major)) {
			continue
		}
		if _, err := purego.Dlopen(m, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			return
		}
	}
}

// symbols resolves names into the fields dst points at. Missing required
// names are returned.
func symbols(h uintptr, syms []sym) (missing []string) {
	for _, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			if !s.optional {
				missing = append(missing, s.name)
			}
			continue
		}
		*s.dst = p
	}
	return missing
}

type sym struct {
	name     string
	dst      *uintptr
	optional bool
}

// call invokes a C function. Pointers converted to uintptr in the argument
// list stay alive and in place until it returns (go:uintptrescapes), as for
// purego.SyscallN itself.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// call32 invokes a C function returning a 32-bit enum (CUresult,
// nvrtcResult, cublasStatus_t): only the low 32 bits of the return register
// are defined.
//
//go:uintptrescapes
func call32(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(uint32(r))
}

// cPointer turns an address C returned into a pointer without tripping vet's
// unsafeptr check: the memory is not Go's, the collector ignores it.
func cPointer(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// goString reads a NUL-terminated C string (at most 4096 bytes).
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	b := unsafe.Slice((*byte)(cPointer(p)), 4096)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// cbytes is a NUL-terminated copy of s for C to read.
func cbytes(s string) []byte { return append([]byte(s), 0) }

// cString reads a NUL-terminated or NUL-padded Go byte buffer.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

// ---------------------------------------------------------------------------
// The CUDA driver.

// CUDA driver constants (cuda.h).
const (
	cuSuccess                  = 0
	cuErrorInvalidValue        = 1
	cuErrorOutOfMemory         = 2
	cuErrorNotInitialized      = 3
	cuErrorDeinitialized       = 4
	cuErrorStubLibrary         = 34
	cuErrorNoDevice            = 100
	cuErrorInvalidDevice       = 101
	cuErrorInvalidImage        = 200
	cuErrorInvalidContext      = 201
	cuErrorNoBinaryForGPU      = 209
	cuErrorInvalidPTX          = 218
	cuErrorUnsupportedPTX      = 222
	cuErrorInvalidHandle       = 400
	cuErrorNotReady            = 600
	cuErrorIllegalAddress      = 700
	cuErrorLaunchOutOfRes      = 701
	cuErrorLaunchFailed        = 719
	cuErrorSystemNotReady      = 802
	cuErrorDriverMismatch      = 803
	cuErrorCaptureUnsupported  = 900
	cuErrorCaptureInvalidated  = 901
	cuErrorCaptureWrongThread  = 908
	cuErrorGraphExecUpdateFail = 910

	cuDeviceAttrMultiprocessorCount = 16
	cuDeviceAttrComputeMajor        = 75
	cuDeviceAttrComputeMinor        = 76

	cuStreamNonBlocking     = 0x1
	cuEventDisableTiming    = 0x2
	cuMemHostAllocPortable  = 0x1
	cuCaptureModeGlobal     = 0
	cuCaptureModeThreadLoc  = 1
	cuCaptureModeRelaxed    = 2
	cuGraphUpdateSuccess    = 0
	cuGraphUpdateTopology   = 2
	cuGraphUpdateNodeType   = 3
	cuGraphUpdateFuncChange = 4
	cuGraphUpdateParams     = 5
	cuGraphUpdateNotSupp    = 6
)

// driver is libcuda: the entry points, resolved once, and cuInit's result.
// It stays loaded for the life of the process once Devices or Open used it.
type driver struct {
	path    string
	h       uintptr
	version int // cuDriverGetVersion: 13000 for CUDA 13.0

	cuInit                            uintptr
	cuDriverGetVersion                uintptr
	cuGetErrorName                    uintptr
	cuGetErrorString                  uintptr
	cuDeviceGetCount                  uintptr
	cuDeviceGet                       uintptr
	cuDeviceGetName                   uintptr
	cuDeviceTotalMem                  uintptr // _v2
	cuDeviceGetAttribute              uintptr
	cuDevicePrimaryCtxRetain          uintptr
	cuDevicePrimaryCtxRelease         uintptr // _v2
	cuCtxSetCurrent                   uintptr
	cuCtxGetCurrent                   uintptr
	cuCtxSynchronize                  uintptr
	cuMemAlloc                        uintptr // _v2
	cuMemFree                         uintptr // _v2
	cuMemGetInfo                      uintptr // _v2
	cuMemHostAlloc                    uintptr
	cuMemFreeHost                     uintptr
	cuMemcpyHtoDAsync                 uintptr // _v2
	cuMemcpyDtoHAsync                 uintptr // _v2
	cuMemcpyDtoDAsync                 uintptr // _v2
	cuStreamCreate                    uintptr
	cuStreamDestroy                   uintptr // _v2
	cuStreamSynchronize               uintptr
	cuStreamWaitEvent                 uintptr
	cuStreamBeginCapture              uintptr // _v2
	cuStreamEndCapture                uintptr
	cuThreadExchangeStreamCaptureMode uintptr
	cuEventCreate                     uintptr
	cuEventDestroy                    uintptr // _v2
	cuEventRecord                     uintptr
	cuEventQuery                      uintptr
	cuEventSynchronize                uintptr
	cuModuleLoadData                  uintptr
	cuModuleUnload                    uintptr
	cuModuleGetFunction               uintptr
	cuLaunchKernel                    uintptr
	cuGraphInstantiateWithFlags       uintptr
	cuGraphLaunch                     uintptr
	cuGraphExecDestroy                uintptr
	cuGraphDestroy                    uintptr
	cuGraphExecUpdate                 uintptr // _v2 (CUDA 12 signature)
}

func (d *driver) symbols() []sym {
	return []sym{
		{name: "cuInit", dst: &d.cuInit},
		{name: "cuDriverGetVersion", dst: &d.cuDriverGetVersion},
		{name: "cuGetErrorName", dst: &d.cuGetErrorName},
		{name: "cuGetErrorString", dst: &d.cuGetErrorString},
		{name: "cuDeviceGetCount", dst: &d.cuDeviceGetCount},
		{name: "cuDeviceGet", dst: &d.cuDeviceGet},
		{name: "cuDeviceGetName", dst: &d.cuDeviceGetName},
		{name: "cuDeviceTotalMem_v2", dst: &d.cuDeviceTotalMem},
		{name: "cuDeviceGetAttribute", dst: &d.cuDeviceGetAttribute},
		{name: "cuDevicePrimaryCtxRetain", dst: &d.cuDevicePrimaryCtxRetain},
		{name: "cuDevicePrimaryCtxRelease_v2", dst: &d.cuDevicePrimaryCtxRelease},
		{name: "cuCtxSetCurrent", dst: &d.cuCtxSetCurrent},
		{name: "cuCtxGetCurrent", dst: &d.cuCtxGetCurrent},
		{name: "cuCtxSynchronize", dst: &d.cuCtxSynchronize},
		{name: "cuMemAlloc_v2", dst: &d.cuMemAlloc},
		{name: "cuMemFree_v2", dst: &d.cuMemFree},
		{name: "cuMemGetInfo_v2", dst: &d.cuMemGetInfo},
		{name: "cuMemHostAlloc", dst: &d.cuMemHostAlloc},
		{name: "cuMemFreeHost", dst: &d.cuMemFreeHost},
		{name: "cuMemcpyHtoDAsync_v2", dst: &d.cuMemcpyHtoDAsync},
		{name: "cuMemcpyDtoHAsync_v2", dst: &d.cuMemcpyDtoHAsync},
		{name: "cuMemcpyDtoDAsync_v2", dst: &d.cuMemcpyDtoDAsync},
		{name: "cuStreamCreate", dst: &d.cuStreamCreate},
		{name: "cuStreamDestroy_v2", dst: &d.cuStreamDestroy},
		{name: "cuStreamSynchronize", dst: &d.cuStreamSynchronize},
		{name: "cuStreamWaitEvent", dst: &d.cuStreamWaitEvent},
		{name: "cuStreamBeginCapture_v2", dst: &d.cuStreamBeginCapture},
		{name: "cuStreamEndCapture", dst: &d.cuStreamEndCapture},
		{name: "cuThreadExchangeStreamCaptureMode", dst: &d.cuThreadExchangeStreamCaptureMode},
		{name: "cuEventCreate", dst: &d.cuEventCreate},
		{name: "cuEventDestroy_v2", dst: &d.cuEventDestroy},
		{name: "cuEventRecord", dst: &d.cuEventRecord},
		{name: "cuEventQuery", dst: &d.cuEventQuery},
		{name: "cuEventSynchronize", dst: &d.cuEventSynchronize},
		{name: "cuModuleLoadData", dst: &d.cuModuleLoadData},
		{name: "cuModuleUnload", dst: &d.cuModuleUnload},
		{name: "cuModuleGetFunction", dst: &d.cuModuleGetFunction},
		{name: "cuLaunchKernel", dst: &d.cuLaunchKernel},
		{name: "cuGraphInstantiateWithFlags", dst: &d.cuGraphInstantiateWithFlags},
		{name: "cuGraphLaunch", dst: &d.cuGraphLaunch},
		{name: "cuGraphExecDestroy", dst: &d.cuGraphExecDestroy},
		{name: "cuGraphDestroy", dst: &d.cuGraphDestroy},
		{name: "cuGraphExecUpdate_v2", dst: &d.cuGraphExecUpdate},
	}
}

var driverSpec = libSpec{
	what:    "the CUDA driver library (libcuda)",
	stem:    "libcuda",
	sonames: []string{"libcuda.so.1", "libcuda.so"},
	// The driver is installed by the NVIDIA driver package, not a toolkit:
	// look where containers mount it as well as the loader's own paths.
	globDirs: true,
	hint:     "install the NVIDIA driver (its libcuda.so.1), or point " + EnvLibraryPath + " at the directory holding libcuda.so.1",
}

var (
	drvMu     sync.Mutex
	drvLoaded *driver
	drvErr    error // cuInit's failure, kept: cuInit is not retried
)

// probeDriver dlopens libcuda and closes it again: nothing is initialised.
func probeDriver() error {
	drvMu.Lock()
	loaded := drvLoaded != nil
	drvMu.Unlock()
	if loaded {
		return nil
	}
	_, h, err := openFirst(driverSpec, driverSpec.candidates(), purego.RTLD_NOW|purego.RTLD_LOCAL, nil)
	if err != nil {
		return err
	}
	_, serr := purego.Dlsym(h, "cuInit")
	_ = purego.Dlclose(h)
	if serr != nil {
		return fmt.Errorf("cuda: the loaded libcuda has no cuInit (%v): %w", serr, accel.ErrBackendUnavailable)
	}
	return nil
}

// loadDriver returns the process's CUDA driver, loading it and calling cuInit
// on first use.
func loadDriver() (*driver, error) {
	drvMu.Lock()
	defer drvMu.Unlock()
	if drvLoaded != nil {
		return drvLoaded, nil
	}
	if drvErr != nil {
		return nil, drvErr
	}
	d := &driver{}
	var missing []string
	path, h, err := openFirst(driverSpec, driverSpec.candidates(), purego.RTLD_NOW|purego.RTLD_GLOBAL, func(p string, h uintptr) string {
		missing = symbols(h, d.symbols())
		if len(missing) > 0 {
			return "lacks " + strings.Join(missing, ", ") + "; a driver for CUDA 12.0 or later is needed"
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	d.path, d.h = path, h
	if code := call32(d.cuInit, 0); code != cuSuccess {
		e := d.err("cuInit", code)
		switch code {
		case cuErrorStubLibrary:
			drvErr = fmt.Errorf("%w: %s is the toolkit's stub, not the driver; point %s at the real driver's directory: %w", e, path, EnvLibraryPath, accel.ErrBackendUnavailable)
		case cuErrorNoDevice:
			drvErr = fmt.Errorf("%w: no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES): %w", e, accel.ErrBackendUnavailable)
		case cuErrorDriverMismatch:
			drvErr = fmt.Errorf("%w: %s does not match the kernel module's version (a compat library on the path?): %w", e, path, accel.ErrBackendUnavailable)
		default:
			drvErr = fmt.Errorf("%w (driver %s): %w", e, path, accel.ErrBackendUnavailable)
		}
		return nil, drvErr
	}
	var v int32
	if code := call32(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))); code == cuSuccess {
		d.version = int(v)
	}
	if d.version != 0 && d.version < 12000 {
		drvErr = fmt.Errorf("cuda: %s is a CUDA %s driver; reprise needs CUDA 12.0 or later (graph update, cuGraphExecUpdate_v2): %w",
			path, versionString(d.version), accel.ErrBackendUnavailable)
		return nil, drvErr
	}
	drvLoaded = d
	return d, nil
}

// versionString renders a CUDA version integer (12040) as "12.4".
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// cuError is a CUresult with the call that returned it.
type cuError struct {
	fn   string
	code int32
	name string // CUDA_ERROR_...
	desc string // the driver's description
}

func (e *cuError) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.fn, e.name, e.code)
	if e.desc != "" {
		s += ": " + e.desc
	}
	switch e.code {
	case cuErrorIllegalAddress, cuErrorLaunchFailed, 710, 714, 715, 716, 717, 718:
		s += " [a kernel faulted: the CUDA context is now unusable and every later call fails; the fault is in a kernel launched before this call]"
	case cuErrorUnsupportedPTX:
		s += " [the PTX NVRTC produced is newer than the driver understands: use an NVRTC no newer than the driver (" + EnvLibraryPath + ")]"
	}
	return s
}

// Unwrap maps allocation failures to accel.ErrOutOfMemory and capture
// failures to accel.ErrCaptureInvalidated.
func (e *cuError) Unwrap() error {
	switch {
	case e.code == cuErrorOutOfMemory:
		return accel.ErrOutOfMemory
	case e.code >= cuErrorCaptureUnsupported && e.code <= cuErrorCaptureWrongThread:
		return accel.ErrCaptureInvalidated
	}
	return nil
}

// err makes a cuError (nil for CUDA_SUCCESS), asking the driver for the
// code's name and description.
func (d *driver) err(fn string, code int32) error {
	if code == cuSuccess {
		return nil
	}
	e := &cuError{fn: fn, code: code, name: "CUDA_ERROR"}
	var p uintptr
	if d.cuGetErrorName != 0 && call32(d.cuGetErrorName, uintptr(code), uintptr(unsafe.Pointer(&p))) == cuSuccess {
		e.name = goString(p)
	}
	p = 0
	if d.cuGetErrorString != 0 && call32(d.cuGetErrorString, uintptr(code), uintptr(unsafe.Pointer(&p))) == cuSuccess {
		e.desc = goString(p)
	}
	return e
}

func cuCode(err error) int32 {
	var ce *cuError
	if errors.As(err, &ce) {
		return ce.code
	}
	return 0
}

// ---------------------------------------------------------------------------
// NVRTC.

// NVRTC constants (nvrtc.h).
const nvrtcSuccess = 0

type nvrtcLib struct {
	path         string
	major, minor int

	nvrtcVersion              uintptr
	nvrtcGetErrorString       uintptr
	nvrtcCreateProgram        uintptr
	nvrtcDestroyProgram       uintptr
	nvrtcCompileProgram       uintptr
	nvrtcGetProgramLogSize    uintptr
	nvrtcGetProgramLog        uintptr
	nvrtcGetPTXSize           uintptr
	nvrtcGetPTX               uintptr
	nvrtcGetCUBINSize         uintptr // 11.1+; 0 if absent
	nvrtcGetCUBIN             uintptr
	nvrtcGetNumSupportedArchs uintptr // 11.2+; 0 if absent
	nvrtcGetSupportedArchs    uintptr
}

func (n *nvrtcLib) symbols() []sym {
	return []sym{
		{name: "nvrtcVersion", dst: &n.nvrtcVersion},
		{name: "nvrtcGetErrorString", dst: &n.nvrtcGetErrorString},
		{name: "nvrtcCreateProgram", dst: &n.nvrtcCreateProgram},
		{name: "nvrtcDestroyProgram", dst: &n.nvrtcDestroyProgram},
		{name: "nvrtcCompileProgram", dst: &n.nvrtcCompileProgram},
		{name: "nvrtcGetProgramLogSize", dst: &n.nvrtcGetProgramLogSize},
		{name: "nvrtcGetProgramLog", dst: &n.nvrtcGetProgramLog},
		{name: "nvrtcGetPTXSize", dst: &n.nvrtcGetPTXSize},
		{name: "nvrtcGetPTX", dst: &n.nvrtcGetPTX},
		{name: "nvrtcGetCUBINSize", dst: &n.nvrtcGetCUBINSize, optional: true},
		{name: "nvrtcGetCUBIN", dst: &n.nvrtcGetCUBIN, optional: true},
		{name: "nvrtcGetNumSupportedArchs", dst: &n.nvrtcGetNumSupportedArchs, optional: true},
		{name: "nvrtcGetSupportedArchs", dst: &n.nvrtcGetSupportedArchs, optional: true},
	}
}

// nvrtcSpec's sonames put the driver's own major version first, then older
// ones; newer NVRTCs emit PTX the driver may not read.
func nvrtcSpec(driverMajor int) libSpec {
	return libSpec{
		what:     "NVRTC (libnvrtc, the CUDA runtime compiler)",
		stem:     "libnvrtc",
		sonames:  majorSonames("libnvrtc", driverMajor, []string{"libnvrtc.so.11.2", "libnvrtc.so"}),
		globDirs: true,
		reject: func(p string) string {
			if strings.Contains(filepath.Base(p), ".alt.") {
				return "alternative build"
			}
			return ""
		},
		hint: "install the CUDA toolkit's NVRTC (e.g. cuda-nvrtc-12-x, or the nvidia-cuda-nvrtc wheel) or point " + EnvLibraryPath + " at the directory holding libnvrtc.so.N",
	}
}

// majorSonames lists stem.so.N for N from the driver's major version down to
// 11, then extra.
func majorSonames(stem string, driverMajor int, extra []string) []string {
	if driverMajor < 12 {
		driverMajor = 13
	}
	var out []string
	for m := driverMajor; m >= 11; m-- {
		out = append(out, fmt.Sprintf("%s.so.%d", stem, m))
	}
	return append(out, extra...)
}

var (
	nvrtcMu     sync.Mutex
	nvrtcLoaded *nvrtcLib
)

// loadNVRTC loads NVRTC once for the process (see findNVRTC).
func loadNVRTC(drv *driver) (*nvrtcLib, error) {
	nvrtcMu.Lock()
	defer nvrtcMu.Unlock()
	if nvrtcLoaded != nil {
		return nvrtcLoaded, nil
	}
	lib, err := findNVRTC(drv.version)
	if err != nil {
		return nil, err
	}
	nvrtcLoaded = lib
	return lib, nil
}

// findNVRTC loads the first NVRTC of the search no newer than the driver's
// CUDA version (driverVersion as cuDriverGetVersion gives it; 0: unknown,
// any); a newer one is taken only if nothing else loads (its PTX may not
// load, but its CUBIN for the device's own architecture usually does).
func findNVRTC(driverVersion int) (*nvrtcLib, error) {
	dmaj, dmin := driverVersion/1000, driverVersion%1000/10
	sp := nvrtcSpec(dmaj)
	cands := sp.candidates()
	var newer *nvrtcLib
	var lib *nvrtcLib
	_, _, err := openFirst(sp, cands, purego.RTLD_NOW|purego.RTLD_LOCAL, func(p string, h uintptr) string {
		preloadSibling(p, "libnvrtc-builtins", sonameMajor(p))
		n := &nvrtcLib{path: p}
		if missing := symbols(h, n.symbols()); len(missing) > 0 {
			return "lacks " + strings.Join(missing, ", ")
		}
		var maj, min int32
		if call32(n.nvrtcVersion, uintptr(unsafe.Pointer(&maj)), uintptr(unsafe.Pointer(&min))) != nvrtcSuccess {
			return "nvrtcVersion failed"
		}
		n.major, n.minor = int(maj), int(min)
		if dmaj > 0 && (n.major > dmaj || n.major == dmaj && n.minor > dmin) {
			if newer == nil {
				newer = n
			}
			return fmt.Sprintf("NVRTC %d.%d is newer than the CUDA %d.%d driver", n.major, n.minor, dmaj, dmin)
		}
		lib = n
		return ""
	})
	if lib != nil {
		return lib, nil
	}
	if newer != nil {
		// Reopen the newer one (openFirst closed it) and use it.
		if _, h, oerr := openFirst(sp, []string{newer.path}, purego.RTLD_NOW|purego.RTLD_LOCAL, nil); oerr == nil {
			symbols(h, newer.symbols())
			return newer, nil
		}
	}
	return nil, err
}

func (n *nvrtcLib) errString(code int32) string {
	if p := call(n.nvrtcGetErrorString, uintptr(code)); p != 0 {
		return goString(p)
	}
	return fmt.Sprintf("NVRTC error %d", code)
}

// ---------------------------------------------------------------------------
// cuBLAS.

// cuBLAS constants (cublas_api.h).
const (
	cublasSuccess     = 0
	cublasDefaultMath = 0 // no TF32 for float32: see doc.go
)

type cublasLib struct {
	path string

	cublasCreate       uintptr // _v2
	cublasDestroy      uintptr // _v2
	cublasSetStream    uintptr // _v2
	cublasSetWorkspace uintptr // _v2; 0 if absent
	cublasSetMathMode  uintptr
	cublasSgemm        uintptr // _v2
	cublasGetVersion   uintptr // _v2
	cublasGetStatusStr uintptr // cublasGetStatusString; 0 if absent
}

func (c *cublasLib) symbols() []sym {
	return []sym{
		{name: "cublasCreate_v2", dst: &c.cublasCreate},
		{name: "cublasDestroy_v2", dst: &c.cublasDestroy},
		{name: "cublasSetStream_v2", dst: &c.cublasSetStream},
		{name: "cublasSetWorkspace_v2", dst: &c.cublasSetWorkspace, optional: true},
		{name: "cublasSetMathMode", dst: &c.cublasSetMathMode},
		{name: "cublasSgemm_v2", dst: &c.cublasSgemm},
		{name: "cublasGetVersion_v2", dst: &c.cublasGetVersion, optional: true},
		{name: "cublasGetStatusString", dst: &c.cublasGetStatusStr, optional: true},
	}
}

func cublasSpec(driverMajor int) libSpec {
	return libSpec{
		what:     "cuBLAS (libcublas)",
		stem:     "libcublas",
		sonames:  majorSonames("libcublas", driverMajor, []string{"libcublas.so"}),
		globDirs: true,
		hint:     "install libcublas (the CUDA toolkit's, or the nvidia-cublas wheel) or point " + EnvLibraryPath + " at its directory; without it MatMul uses reprise's own kernel",
	}
}

var (
	blasOnce   sync.Once
	blasLoaded *cublasLib
	blasErr    error
)

// loadCUBLAS loads cuBLAS once for the process (see findCUBLAS). Its
// failure is not fatal: MatMul falls back to reprise's own kernel.
func loadCUBLAS(drv *driver) (*cublasLib, error) {
	blasOnce.Do(func() {
		if v := strings.ToLower(os.Getenv(EnvCUBLAS)); v == "0" || v == "off" || v == "false" || v == "no" {
			blasErr = fmt.Errorf("cuBLAS disabled by %s=%s", EnvCUBLAS, os.Getenv(EnvCUBLAS))
			return
		}
		blasLoaded, blasErr = findCUBLAS(drv.version)
	})
	return blasLoaded, blasErr
}

// findCUBLAS loads the first cuBLAS of the search whose major version the
// driver supports. A libcublas whose libcublasLt is not on the loader's path
// fails to load; its sibling is then preloaded and the search runs again.
func findCUBLAS(driverVersion int) (*cublasLib, error) {
	dmaj := driverVersion / 1000
	sp := cublasSpec(dmaj)
	try := func() (*cublasLib, error) {
		var lib *cublasLib
		_, _, err := openFirst(sp, sp.candidates(), purego.RTLD_NOW|purego.RTLD_LOCAL, func(p string, h uintptr) string {
			c := &cublasLib{path: p}
			if missing := symbols(h, c.symbols()); len(missing) > 0 {
				return "lacks " + strings.Join(missing, ", ")
			}
			if m := sonameMajor(p); m > 0 && dmaj > 0 && m > dmaj {
				return fmt.Sprintf("cuBLAS %d needs a newer driver than CUDA %s", m, versionString(driverVersion))
			}
			lib = c
			return ""
		})
		return lib, err
	}
	lib, err := try()
	if lib != nil {
		return lib, nil
	}
	for _, p := range sp.candidates() {
		if _, serr := os.Stat(p); strings.Contains(p, "/") && serr == nil {
			preloadSibling(p, "libcublasLt", sonameMajor(p))
		}
	}
	if lib2, err2 := try(); lib2 != nil {
		return lib2, nil
	} else if err == nil {
		err = err2
	}
	return nil, err
}

func (c *cublasLib) err(fn string, code int32) error {
	if code == cublasSuccess {
		return nil
	}
	name := map[int32]string{1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
		8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
		14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}[code]
	if name == "" {
		name = "CUBLAS_STATUS"
	}
	desc := ""
	if c.cublasGetStatusStr != 0 {
		desc = goString(call(c.cublasGetStatusStr, uintptr(code)))
	}
	err := fmt.Errorf("cuda: %s: %s (%d) %s", fn, name, code, desc)
	if code == 3 {
		return fmt.Errorf("%w: %w", err, accel.ErrOutOfMemory)
	}
	return err
}

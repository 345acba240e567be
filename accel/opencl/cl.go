//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/reprise-ml/reprise/accel"
)

// OpenCL constants used here (from CL/cl.h and CL/cl_ext.h).
const (
	clSuccess                  = 0
	clDeviceNotFound           = -1
	clPlatformNotFoundKHR      = -1001
	clInvalidValue             = -30
	clInvalidOperation         = -59
	clInvalidProperty          = -64
	clIncompatibleQueueKHR     = -1140
	clBuildProgramFailure      = -11
	clDeviceTypeAll            = 0xFFFFFFFF
	clPlatformVersion          = 0x0901
	clPlatformName             = 0x0902
	clPlatformVendor           = 0x0903
	clDeviceMaxComputeUnits    = 0x1002
	clDeviceMaxWorkGroupSize   = 0x1004
	clDeviceMaxMemAllocSize    = 0x1010
	clDeviceSingleFPConfig     = 0x101B
	clDeviceGlobalMemSize      = 0x101F
	clDeviceEndianLittle       = 0x1026
	clDeviceAvailable          = 0x1027
	clDeviceCompilerAvailable  = 0x1028
	clDeviceName               = 0x102B
	clDeviceVendor             = 0x102C
	clDriverVersion            = 0x102D
	clDeviceVersion            = 0x102F
	clDeviceExtensions         = 0x1030
	clFPCorrectlyRoundedDivSqr = 1 << 7
	clContextPlatform          = 0x1084
	clQueueProperties          = 0x1093
	clMemReadWrite             = 1 << 0
	clMemReadOnly              = 1 << 2
	clMemAllocHostPtr          = 1 << 4
	clMemCopyHostPtr           = 1 << 5
	clMapRead                  = 1 << 0
	clMapWrite                 = 1 << 1
	clProgramBuildLog          = 0x1183
	clKernelWorkGroupSize      = 0x11B0
	clEventExecutionStatus     = 0x11D3
	clComplete                 = 0

	// cl_khr_command_buffer
	clDeviceCommandBufferRequiredQueueProps = 0x12AA
	clCommandBufferFlagsKHR                 = 0x1293
	clCommandBufferSimultaneousUseKHR       = 1 << 0
)

// EnvLibrary overrides the OpenCL library the backend loads (a path or a
// soname). When set, it is the only one tried.
const EnvLibrary = "REPRISE_OPENCL_LIBRARY"

// defaultLibraries are tried in order when EnvLibrary is unset.
func defaultLibraries() []string {
	if runtime.GOOS == "darwin" {
		return []string{"/System/Library/Frameworks/OpenCL.framework/OpenCL", "libOpenCL.dylib"}
	}
	return []string{"libOpenCL.so.1", "libOpenCL.so"}
}

func libraryCandidates() []string {
	if p := os.Getenv(EnvLibrary); p != "" {
		return []string{p}
	}
	return defaultLibraries()
}

// lib is the loaded OpenCL library: the entry points, resolved once. It stays
// loaded for the life of the process once a device has used it.
type lib struct {
	path   string
	handle uintptr

	getPlatformIDs                         uintptr
	getPlatformInfo                        uintptr
	getDeviceIDs                           uintptr
	getDeviceInfo                          uintptr
	createContext                          uintptr
	releaseContext                         uintptr
	createCommandQueueWithProperties       uintptr // OpenCL 2.0; 0 if absent
	createCommandQueue                     uintptr // OpenCL 1.x
	releaseCommandQueue                    uintptr
	flush                                  uintptr
	finish                                 uintptr
	createBuffer                           uintptr
	retainMemObject                        uintptr
	releaseMemObject                       uintptr
	enqueueMapBuffer                       uintptr
	enqueueUnmapMemObject                  uintptr
	enqueueCopyBuffer                      uintptr
	enqueueReadBuffer                      uintptr
	createProgramWithSource                uintptr
	buildProgram                           uintptr
	getProgramBuildInfo                    uintptr
	releaseProgram                         uintptr
	createKernel                           uintptr
	setKernelArg                           uintptr
	getKernelWorkGroupInfo                 uintptr
	releaseKernel                          uintptr
	enqueueNDRangeKernel                   uintptr
	enqueueMarkerWithWaitList              uintptr
	enqueueBarrierWithWaitList             uintptr
	getEventInfo                           uintptr
	waitForEvents                          uintptr
	retainEvent                            uintptr
	releaseEvent                           uintptr
	getExtensionFunctionAddressForPlatform uintptr
}

var (
	libMu     sync.Mutex
	libLoaded *lib
)

// openLibrary dlopens the first candidate that loads, or fails with an error
// wrapping accel.ErrBackendUnavailable that names every path searched.
func openLibrary(cands []string) (string, uintptr, error) {
	var why []string
	for _, p := range cands {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return p, h, nil
		}
		why = append(why, fmt.Sprintf("%s (%v)", p, err))
	}
	hint := ""
	if os.Getenv(EnvLibrary) == "" {
		hint = fmt.Sprintf("; install an OpenCL ICD loader and driver (Debian: ocl-icd-libopencl1 pocl-opencl-icd) or set %s", EnvLibrary)
	} else {
		hint = fmt.Sprintf(" (from %s)", EnvLibrary)
	}
	return "", 0, fmt.Errorf("opencl: no OpenCL library loads; searched %s%s: %w",
		strings.Join(why, ", "), hint, accel.ErrBackendUnavailable)
}

// probeLibrary loads and unloads the library: no platform is initialised.
func probeLibrary() error {
	_, h, err := openLibrary(libraryCandidates())
	if err != nil {
		return err
	}
	_, serr := purego.Dlsym(h, "clGetPlatformIDs")
	_ = purego.Dlclose(h)
	if serr != nil {
		return fmt.Errorf("opencl: library has no clGetPlatformIDs (%v): %w", serr, accel.ErrBackendUnavailable)
	}
	return nil
}

// loadLibrary returns the process's OpenCL library, loading it on first use.
func loadLibrary() (*lib, error) {
	libMu.Lock()
	defer libMu.Unlock()
	cands := libraryCandidates()
	if libLoaded != nil {
		for _, c := range cands {
			if c == libLoaded.path {
				return libLoaded, nil
			}
		}
	}
	path, h, err := openLibrary(cands)
	if err != nil {
		return nil, err
	}
	l := &lib{path: path, handle: h}
	var missing []string
	sym := func(name string, dst *uintptr, required bool) {
		p, err := purego.Dlsym(h, name)
		if err != nil || p == 0 {
			if required {
				missing = append(missing, name)
			}
			return
		}
		*dst = p
	}
	sym("clGetPlatformIDs", &l.getPlatformIDs, true)
	sym("clGetPlatformInfo", &l.getPlatformInfo, true)
	sym("clGetDeviceIDs", &l.getDeviceIDs, true)
	sym("clGetDeviceInfo", &l.getDeviceInfo, true)
	sym("clCreateContext", &l.createContext, true)
	sym("clReleaseContext", &l.releaseContext, true)
	sym("clCreateCommandQueueWithProperties", &l.createCommandQueueWithProperties, false)
	sym("clCreateCommandQueue", &l.createCommandQueue, false)
	sym("clReleaseCommandQueue", &l.releaseCommandQueue, true)
	sym("clFlush", &l.flush, true)
	sym("clFinish", &l.finish, true)
	sym("clCreateBuffer", &l.createBuffer, true)
	sym("clRetainMemObject", &l.retainMemObject, true)
	sym("clReleaseMemObject", &l.releaseMemObject, true)
	sym("clEnqueueMapBuffer", &l.enqueueMapBuffer, true)
	sym("clEnqueueUnmapMemObject", &l.enqueueUnmapMemObject, true)
	sym("clEnqueueCopyBuffer", &l.enqueueCopyBuffer, true)
	sym("clEnqueueReadBuffer", &l.enqueueReadBuffer, true)
	sym("clCreateProgramWithSource", &l.createProgramWithSource, true)
	sym("clBuildProgram", &l.buildProgram, true)
	sym("clGetProgramBuildInfo", &l.getProgramBuildInfo, true)
	sym("clReleaseProgram", &l.releaseProgram, true)
	sym("clCreateKernel", &l.createKernel, true)
	sym("clSetKernelArg", &l.setKernelArg, true)
	sym("clGetKernelWorkGroupInfo", &l.getKernelWorkGroupInfo, true)
	sym("clReleaseKernel", &l.releaseKernel, true)
	sym("clEnqueueNDRangeKernel", &l.enqueueNDRangeKernel, true)
	sym("clEnqueueMarkerWithWaitList", &l.enqueueMarkerWithWaitList, true)
	sym("clEnqueueBarrierWithWaitList", &l.enqueueBarrierWithWaitList, true)
	sym("clGetEventInfo", &l.getEventInfo, true)
	sym("clWaitForEvents", &l.waitForEvents, true)
	sym("clRetainEvent", &l.retainEvent, true)
	sym("clReleaseEvent", &l.releaseEvent, true)
	sym("clGetExtensionFunctionAddressForPlatform", &l.getExtensionFunctionAddressForPlatform, false)
	if l.createCommandQueueWithProperties == 0 && l.createCommandQueue == 0 {
		missing = append(missing, "clCreateCommandQueue")
	}
	if len(missing) > 0 {
		_ = purego.Dlclose(h)
		return nil, fmt.Errorf("opencl: %s lacks %s (OpenCL 1.2 or later is required): %w",
			path, strings.Join(missing, ", "), accel.ErrBackendUnavailable)
	}
	libLoaded = l
	return l, nil
}

// call invokes a C function. Pointers converted to uintptr in the argument
// list of a call to call stay alive and in place until it returns
// (go:uintptrescapes), as for purego.SyscallN itself.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// callErr invokes a C function returning cl_int.
//
//go:uintptrescapes
func callErr(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

// clError is an OpenCL status code with the call that returned it.
type clError struct {
	fn   string
	code int32
}

func (e *clError) Error() string {
	return fmt.Sprintf("opencl: %s: %s (%d)", e.fn, errName(e.code), e.code)
}

// Unwrap maps the allocation failures to accel.ErrOutOfMemory.
func (e *clError) Unwrap() error {
	switch e.code {
	case -4, -5, -6, -61: // MEM_OBJECT_ALLOCATION_FAILURE, OUT_OF_RESOURCES, OUT_OF_HOST_MEMORY, INVALID_BUFFER_SIZE
		return accel.ErrOutOfMemory
	}
	return nil
}

func check(fn string, code int32) error {
	if code == clSuccess {
		return nil
	}
	return &clError{fn: fn, code: code}
}

func clCode(err error) int32 {
	var ce *clError
	if errors.As(err, &ce) {
		return ce.code
	}
	return 0
}

var errNames = map[int32]string{
	-1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
	-4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
	-7: "CL_PROFILING_INFO_NOT_AVAILABLE", -8: "CL_MEM_COPY_OVERLAP", -11: "CL_BUILD_PROGRAM_FAILURE",
	-12: "CL_MAP_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET",
	-14: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", -30: "CL_INVALID_VALUE",
	-31: "CL_INVALID_DEVICE_TYPE", -32: "CL_INVALID_PLATFORM", -33: "CL_INVALID_DEVICE",
	-34: "CL_INVALID_CONTEXT", -35: "CL_INVALID_QUEUE_PROPERTIES", -36: "CL_INVALID_COMMAND_QUEUE",
	-37: "CL_INVALID_HOST_PTR", -38: "CL_INVALID_MEM_OBJECT", -43: "CL_INVALID_BUILD_OPTIONS",
	-44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME",
	-47: "CL_INVALID_KERNEL_DEFINITION", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX",
	-50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS",
	-53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE",
	-56: "CL_INVALID_GLOBAL_OFFSET", -57: "CL_INVALID_EVENT_WAIT_LIST", -58: "CL_INVALID_EVENT",
	-59: "CL_INVALID_OPERATION", -61: "CL_INVALID_BUFFER_SIZE", -63: "CL_INVALID_GLOBAL_WORK_SIZE",
	-64: "CL_INVALID_PROPERTY", -66: "CL_INVALID_COMPILER_OPTIONS", -72: "CL_MAX_SIZE_RESTRICTION_EXCEEDED",
	-1001: "CL_PLATFORM_NOT_FOUND_KHR", -1138: "CL_INVALID_COMMAND_BUFFER_KHR",
	-1139: "CL_INVALID_SYNC_POINT_WAIT_LIST_KHR", -1140: "CL_INCOMPATIBLE_COMMAND_QUEUE_KHR",
}

func errName(code int32) string {
	if n, ok := errNames[code]; ok {
		return n
	}
	return "OpenCL error"
}

// cPointer turns an address C returned into a pointer without tripping vet's
// unsafeptr check: the memory is not Go's, the collector ignores it.
func cPointer(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// cString reads a NUL-terminated or NUL-padded byte buffer as a string.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

// info queries with the OpenCL two-call size protocol: fn(obj, param, size,
// value, &sizeRet).
func (l *lib) infoBytes(fn uintptr, name string, obj uintptr, param uint32) ([]byte, error) {
	var n uintptr
	if err := check(name, callErr(fn, obj, uintptr(param), 0, 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	if err := check(name, callErr(fn, obj, uintptr(param), n, uintptr(unsafe.Pointer(&b[0])), 0)); err != nil {
		return nil, err
	}
	return b, nil
}

func (l *lib) deviceString(dev uintptr, param uint32) string {
	b, err := l.infoBytes(l.getDeviceInfo, "clGetDeviceInfo", dev, param)
	if err != nil {
		return ""
	}
	return cString(b)
}

func (l *lib) platformString(p uintptr, param uint32) string {
	b, err := l.infoBytes(l.getPlatformInfo, "clGetPlatformInfo", p, param)
	if err != nil {
		return ""
	}
	return cString(b)
}

// deviceUint reads a cl_uint, cl_ulong, size_t or cl_bool device parameter
// (little-endian, zero-extended).
func (l *lib) deviceUint(dev uintptr, param uint32) (uint64, error) {
	var v uint64
	err := check("clGetDeviceInfo", callErr(l.getDeviceInfo, dev, uintptr(param), 8, uintptr(unsafe.Pointer(&v)), 0))
	if err != nil {
		// A 4-byte parameter with an implementation that insists on the
		// exact size.
		var u uint32
		if err2 := check("clGetDeviceInfo", callErr(l.getDeviceInfo, dev, uintptr(param), 4, uintptr(unsafe.Pointer(&u)), 0)); err2 == nil {
			return uint64(u), nil
		}
		return 0, err
	}
	return v, nil
}

// devRef is one OpenCL device and its platform.
type devRef struct {
	platform uintptr
	device   uintptr
}

// enumerate lists every device of every platform, in platform order.
func (l *lib) enumerate() ([]devRef, error) {
	var np uint32
	code := callErr(l.getPlatformIDs, 0, 0, uintptr(unsafe.Pointer(&np)))
	if code == clPlatformNotFoundKHR || (code == clSuccess && np == 0) {
		where := "/etc/OpenCL/vendors"
		if v := os.Getenv("OCL_ICD_VENDORS"); v != "" {
			where = v + " (OCL_ICD_VENDORS)"
		}
		return nil, fmt.Errorf("opencl: %s loaded but reports no OpenCL platform (no vendor driver registered in %s; install e.g. pocl-opencl-icd): %w",
			l.path, where, accel.ErrBackendUnavailable)
	}
	if err := check("clGetPlatformIDs", code); err != nil {
		return nil, fmt.Errorf("%w: %w", err, accel.ErrBackendUnavailable)
	}
	ps := make([]uintptr, np)
	if err := check("clGetPlatformIDs", callErr(l.getPlatformIDs, uintptr(np), uintptr(unsafe.Pointer(&ps[0])), 0)); err != nil {
		return nil, fmt.Errorf("%w: %w", err, accel.ErrBackendUnavailable)
	}
	var out []devRef
	for _, p := range ps {
		var nd uint32
		code := callErr(l.getDeviceIDs, p, clDeviceTypeAll, 0, 0, uintptr(unsafe.Pointer(&nd)))
		if code == clDeviceNotFound || nd == 0 {
			continue
		}
		if err := check("clGetDeviceIDs", code); err != nil {
			continue
		}
		ds := make([]uintptr, nd)
		if err := check("clGetDeviceIDs", callErr(l.getDeviceIDs, p, clDeviceTypeAll, uintptr(nd), uintptr(unsafe.Pointer(&ds[0])), 0)); err != nil {
			continue
		}
		for _, d := range ds {
			out = append(out, devRef{platform: p, device: d})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("opencl: %d OpenCL platform(s) but no device: %w", np, accel.ErrBackendUnavailable)
	}
	return out, nil
}

// extension resolves an extension entry point for a platform (0 if absent).
func (l *lib) extension(platform uintptr, name string) uintptr {
	if l.getExtensionFunctionAddressForPlatform == 0 {
		return 0
	}
	b := append([]byte(name), 0)
	return call(l.getExtensionFunctionAddressForPlatform, platform, uintptr(unsafe.Pointer(&b[0])))
}

func hasExtension(list, name string) bool {
	for _, e := range strings.Fields(list) {
		if e == name {
			return true
		}
	}
	return false
}

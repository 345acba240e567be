//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// nvrtcOptions are the options kernels.cu is compiled with for target
// ("sm_90" for a CUBIN, "compute_90" for PTX). --fmad=false keeps a*b+c two
// roundings, as on the CPU device; -default-device makes unannotated
// functions device functions. Precise division and square root are NVRTC's
// defaults (no --use_fast_math).
func nvrtcOptions(target string) []string {
	return []string{
		"--gpu-architecture=" + target,
		"-default-device",
		"--fmad=false",
	}
}

// kernelImage is kernels.cu compiled for one device architecture.
type kernelImage struct {
	image  []byte // CUBIN, or NUL-terminated PTX
	target string // sm_90 or compute_90
	ptx    bool
	nvrtc  string // "NVRTC 12.4 (path)"
}

// compileTarget compiles kernels.cu for one target.
func (n *nvrtcLib) compile(src, target string) (kernelImage, error) {
	img := kernelImage{target: target, ptx: strings.HasPrefix(target, "compute_"),
		nvrtc: fmt.Sprintf("NVRTC %d.%d (%s)", n.major, n.minor, n.path)}
	if !img.ptx && (n.nvrtcGetCUBINSize == 0 || n.nvrtcGetCUBIN == 0) {
		return img, fmt.Errorf("cuda: %s cannot emit CUBIN", img.nvrtc)
	}
	csrc := cbytes(src)
	cname := cbytes("kernels.cu")
	var prog uintptr
	if code := call32(n.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])),
		uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); code != nvrtcSuccess {
		return img, fmt.Errorf("cuda: nvrtcCreateProgram: %s", n.errString(code))
	}
	defer call32(n.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog)))
	opts := nvrtcOptions(target)
	// The options array holds pointers to Go memory: pin them while NVRTC
	// reads them.
	bufs := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, o := range opts {
		bufs[i] = cbytes(o)
		pin.Pin(&bufs[i][0])
		ptrs[i] = uintptr(unsafe.Pointer(&bufs[i][0]))
	}
	code := call32(n.nvrtcCompileProgram, prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(bufs)
	if code != nvrtcSuccess {
		return img, fmt.Errorf("cuda: compiling kernels.cu with %s, options %q: %s\nNVRTC log:\n%s",
			img.nvrtc, strings.Join(opts, " "), n.errString(code), n.log(prog))
	}
	sizeFn, getFn, what := n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "CUBIN"
	if img.ptx {
		sizeFn, getFn, what = n.nvrtcGetPTXSize, n.nvrtcGetPTX, "PTX"
	}
	var size uintptr
	if code := call32(sizeFn, prog, uintptr(unsafe.Pointer(&size))); code != nvrtcSuccess || size == 0 {
		return img, fmt.Errorf("cuda: nvrtcGet%sSize: %s (size %d)", what, n.errString(code), size)
	}
	img.image = make([]byte, size)
	if code := call32(getFn, prog, uintptr(unsafe.Pointer(&img.image[0]))); code != nvrtcSuccess {
		return img, fmt.Errorf("cuda: nvrtcGet%s: %s", what, n.errString(code))
	}
	return img, nil
}

func (n *nvrtcLib) log(prog uintptr) string {
	var size uintptr
	if call32(n.nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&size))) != nvrtcSuccess || size <= 1 {
		return "(empty)"
	}
	b := make([]byte, size)
	if call32(n.nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&b[0]))) != nvrtcSuccess {
		return "(unavailable)"
	}
	return cString(b)
}

// supportedArchs is the architectures NVRTC compiles for (nil when this
// NVRTC cannot say).
func (n *nvrtcLib) supportedArchs() []int {
	if n.nvrtcGetNumSupportedArchs == 0 || n.nvrtcGetSupportedArchs == 0 {
		return nil
	}
	var num int32
	if call32(n.nvrtcGetNumSupportedArchs, uintptr(unsafe.Pointer(&num))) != nvrtcSuccess || num <= 0 || num > 1024 {
		return nil
	}
	a := make([]int32, num)
	if call32(n.nvrtcGetSupportedArchs, uintptr(unsafe.Pointer(&a[0]))) != nvrtcSuccess {
		return nil
	}
	out := make([]int, num)
	for i, v := range a {
		out[i] = int(v)
	}
	sort.Ints(out)
	return out
}

// compileTargets is the order in which targets are tried for a device of
// compute capability cc (major*10+minor) given the architectures NVRTC
// supports (nil: unknown): the device's own CUBIN, then its PTX; on an NVRTC
// that does not know the device, PTX for the newest architecture it knows
// below the device's, which the driver compiles forward.
func compileTargets(cc int, archs []int) ([]string, error) {
	if archs == nil {
		return []string{fmt.Sprintf("sm_%d", cc), fmt.Sprintf("compute_%d", cc)}, nil
	}
	best := -1
	for _, a := range archs {
		if a <= cc && a > best {
			best = a
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("cuda: this NVRTC compiles for %v, none at or below the device's compute capability %d.%d", archs, cc/10, cc%10)
	}
	if best == cc {
		return []string{fmt.Sprintf("sm_%d", cc), fmt.Sprintf("compute_%d", cc)}, nil
	}
	return []string{fmt.Sprintf("compute_%d", best)}, nil
}

var (
	imageMu    sync.Mutex
	imageCache = map[int]kernelImage{} // by compute capability, the image that loaded
)

func cachedImage(cc int) (kernelImage, bool) {
	imageMu.Lock()
	defer imageMu.Unlock()
	img, ok := imageCache[cc]
	return img, ok
}

func cacheImage(cc int, img kernelImage) {
	imageMu.Lock()
	imageCache[cc] = img
	imageMu.Unlock()
}

//go:build linux && (amd64 || arm64) && !goexperiment.simd

package cuda

import (
	"strings"
	"testing"
)

// NVRTC needs no GPU: where it is installed (or REPRISE_CUDA_LIBRARY_PATH
// points at it), kernels.cu is compiled for the architectures reprise runs on
// and every kernel must be in the result. Without NVRTC the test skips.
func TestKernelsCompileWithNVRTC(t *testing.T) {
	nv, err := testNVRTC()
	if err != nil {
		t.Skipf("no NVRTC here: %v", err)
	}
	t.Logf("NVRTC %d.%d from %s; supported architectures %v", nv.major, nv.minor, nv.path, nv.supportedArchs())
	for _, cc := range []int{90, 80} {
		targets, err := compileTargets(cc, nv.supportedArchs())
		if err != nil {
			t.Fatal(err)
		}
		for _, tgt := range targets {
			img, err := nv.compile(kernelSource, tgt)
			if err != nil {
				t.Fatalf("%s: %v", tgt, err)
			}
			if len(img.image) < 1000 {
				t.Fatalf("%s: a %d-byte image", tgt, len(img.image))
			}
			text := string(img.image)
			for _, sp := range kernelSpecs {
				if !strings.Contains(text, sp.name) {
					t.Errorf("%s: kernel %s missing from the image", tgt, sp.name)
				}
			}
			if img.ptx {
				if !strings.HasSuffix(text, "\x00") {
					t.Errorf("%s: PTX not NUL-terminated", tgt)
				}
				checkPTX(t, tgt, text)
			}
		}
	}
}

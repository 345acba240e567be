//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

var updateFallback = flag.Bool("update-fallback-ptx", false, "regenerate kernels_fallback.ptx with the NVRTC found")

// The embedded fallback PTX is kernels.cu's: where NVRTC is here, a stale
// fallback fails the test (regenerate it with
// go test ./accel/cuda -run TestFallbackPTX -args -update-fallback-ptx, with the
// oldest NVRTC at hand, e.g. Debian's 11.8: its PTX loads on every newer
// driver); without NVRTC a stale fallback is only reported, and Open never
// loads it.
func TestFallbackPTX(t *testing.T) {
	if lines := strings.SplitN(fallbackPTX, "\n", 3); len(lines) < 3 || lines[1] != fallbackRegenerate {
		t.Errorf("the fallback PTX's second line should be the command that regenerates it, %q", fallbackRegenerate)
	}
	_, by, current := fallbackImage()
	if *updateFallback {
		nv, err := findNVRTC(0)
		if err != nil {
			t.Fatalf("regenerating needs NVRTC: %v", err)
		}
		img, err := nv.compile(kernelSource, fmt.Sprintf("compute_%d", fallbackArch))
		if err != nil {
			t.Fatal(err)
		}
		body := strings.TrimRight(string(img.image), "\x00")
		out := fallbackHeader(sourceSum(), fmt.Sprintf("NVRTC %d.%d", nv.major, nv.minor)) + "\n" + fallbackRegenerate + "\n" + body
		if err := os.WriteFile("kernels_fallback.ptx", []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote kernels_fallback.ptx (%d bytes) with NVRTC %d.%d; rebuild to embed it", len(out), nv.major, nv.minor)
		return
	}
	if !current {
		msg := by + "; regenerate: go test ./accel/cuda -run TestFallbackPTX -args -update-fallback-ptx (needs NVRTC; " + EnvLibraryPath + ")"
		if _, err := findNVRTC(0); err == nil {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Logf("fallback PTX current, built by %s", by)
	checkPTX(t, "fallback", fallbackPTX)
}

// checkPTX looks at what NVRTC made of the kernels: every extern "C" kernel is
// an .entry with as many parameters as the Go table says, no kernel spills
// into a local-memory stack frame it should not need, and no fused
// multiply-add was contracted in a kernel (--fmad=false).
func checkPTX(t *testing.T, tgt, ptx string) {
	entry := regexp.MustCompile(`(?s)\.entry\s+(\w+)\s*\((.*?)\)`)
	found := map[string][]int{} // parameter sizes in bytes
	for _, m := range entry.FindAllStringSubmatch(ptx, -1) {
		var sizes []int
		for _, p := range strings.Split(m[2], ",") {
			sizes = append(sizes, ptxParamSize(p))
		}
		found[m[1]] = sizes
	}
	kindSize := map[argKind]int{aPtr: 8, aI64: 8, aI32: 4, aF32: 4, aRope: 4 * ropeTable}
	for _, sp := range kernelSpecs {
		sizes, ok := found[sp.name]
		if !ok {
			t.Errorf("%s: no .entry %s", tgt, sp.name)
			continue
		}
		if len(sizes) != len(sp.params) {
			t.Errorf("%s: .entry %s has %d parameters, the Go table %d", tgt, sp.name, len(sizes), len(sp.params))
			continue
		}
		for i, k := range sp.params {
			if sizes[i] != kindSize[k] {
				t.Errorf("%s: %s parameter %d is %d bytes in the PTX, the Go side packs %v (%d bytes)", tgt, sp.name, i, sizes[i], k, kindSize[k])
			}
		}
	}
	// The math library's expf, sin and cos use fma on purpose; the kernels
	// made of products and sums alone must have none.
	for _, name := range []string{"k_matmul_f32", "k_matmul_bf16", "k_add", "k_add_row", "k_rmsnorm", "k_embed_f32", "k_embed_bf16", "k_kv_write", "k_fill"} {
		body := entryBody(ptx, name)
		if body == "" {
			continue
		}
		if strings.Contains(body, "fma.rn.f32") {
			t.Errorf("%s: %s has a single-precision fma despite --fmad=false", tgt, name)
		}
	}
}

// ptxParamSize is the size of one .param declaration: ".param .u64 x" (8),
// ".param .f32 x" (4), ".param .align 4 .b8 x[512]" (512); 0 if unknown.
func ptxParamSize(p string) int {
	if m := regexp.MustCompile(`\[(\d+)\]`).FindStringSubmatch(p); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for _, t := range []struct {
		typ  string
		size int
	}{{".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8}, {".u32", 4}, {".s32", 4}, {".b32", 4}, {".f32", 4}} {
		if strings.Contains(p, t.typ+" ") {
			return t.size
		}
	}
	return 0
}

// entryBody is the PTX of one .entry, up to the next .entry or .func.
func entryBody(ptx, name string) string {
	i := strings.Index(ptx, ".entry "+name+"(")
	if i < 0 {
		return ""
	}
	rest := ptx[i+1:]
	j := len(rest)
	for _, next := range []string{".entry ", ".func "} {
		if k := strings.Index(rest, next); k >= 0 && k < j {
			j = k
		}
	}
	return rest[:j]
}

// cuBLAS, where installed, has every entry point the backend calls.
func TestCUBLASSymbols(t *testing.T) {
	var b *cublasLib
	var err error
	if drv, derr := loadDriver(); derr == nil {
		b, err = loadCUBLAS(drv) // the one Open uses
	} else {
		b, err = findCUBLAS(0)
	}
	if err != nil {
		t.Skipf("no cuBLAS here: %v", err)
	}
	t.Logf("cuBLAS %s", b.path)
	if b.cublasSetWorkspace == 0 {
		t.Errorf("%s has no cublasSetWorkspace_v2: captures would fall back to reprise's matmul", b.path)
	}
}

// testNVRTC is the NVRTC Open uses where a driver is present, else any
// NVRTC the search finds (this test needs no GPU).
func testNVRTC() (*nvrtcLib, error) {
	if drv, err := loadDriver(); err == nil {
		return loadNVRTC(drv)
	}
	return findNVRTC(0)
}

func TestCompileTargets(t *testing.T) {
	for _, c := range []struct {
		cc    int
		archs []int
		want  []string
		err   bool
	}{
		{90, nil, []string{"sm_90", "compute_90"}, false},
		{90, []int{75, 80, 86, 89, 90}, []string{"sm_90", "compute_90"}, false},
		{100, []int{75, 80, 86, 89, 90}, []string{"compute_90"}, false},
		{60, []int{75, 80}, nil, true},
	} {
		got, err := compileTargets(c.cc, c.archs)
		if (err != nil) != c.err || !slices.Equal(got, c.want) {
			t.Errorf("compileTargets(%d, %v) = %v, %v; want %v (error %v)", c.cc, c.archs, got, err, c.want, c.err)
		}
	}
	opts := nvrtcOptions("sm_90")
	for _, want := range []string{"--gpu-architecture=sm_90", "-default-device", "--fmad=false"} {
		if !slices.Contains(opts, want) {
			t.Errorf("NVRTC options %q lack %q", opts, want)
		}
	}
	for _, o := range opts {
		if strings.Contains(o, "fast") {
			t.Errorf("NVRTC option %q would change the numerics", o)
		}
	}
}

// The search for libraries tries REPRISE_CUDA_LIBRARY_PATH's directories
// first, then the loader's own search, then the usual directories; a failed
// search names every path.
func TestLibrarySearch(t *testing.T) {
	dir1, dir2 := t.TempDir(), t.TempDir()
	// A versioned NVRTC in the second directory is found by its glob.
	fake := filepath.Join(dir2, "libnvrtc.so.12.4.99")
	if err := os.WriteFile(fake, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"libnvrtc-builtins.so.12.4", "libnvrtc.alt.so.12"} {
		if err := os.WriteFile(filepath.Join(dir2, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(EnvLibraryPath, dir1+":"+dir2)
	c := nvrtcSpec(12).candidates()
	want := []string{filepath.Join(dir1, "libnvrtc.so.12"), filepath.Join(dir1, "libnvrtc.so.11"), filepath.Join(dir1, "libnvrtc.so.11.2"),
		filepath.Join(dir1, "libnvrtc.so"), fake, "libnvrtc.so.12", "libnvrtc.so.11", "libnvrtc.so.11.2", "libnvrtc.so"}
	if len(c) < len(want) || !slices.Equal(c[:len(want)], want) {
		t.Fatalf("candidates\n%q\nwant them to start with\n%q", c, want)
	}
	for _, p := range c {
		if strings.Contains(p, "builtins") || strings.Contains(p, ".alt.") {
			t.Errorf("candidate %s is not NVRTC itself", p)
		}
	}
	// Nothing loadable: the error names every path. (A made-up library:
	// another test may have loaded a real NVRTC into this process.)
	sp := libSpec{what: "a test library", stem: "libreprise-missing", sonames: []string{"libreprise-missing.so.1"}, globDirs: true, hint: "none"}
	if err := os.WriteFile(filepath.Join(dir2, "libreprise-missing.so.3"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	mc := sp.candidates()
	_, _, err := openFirst(sp, mc, 2, nil)
	if !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("opening nothing loadable: %v", err)
	}
	for _, p := range []string{filepath.Join(dir1, "libreprise-missing.so.1"), filepath.Join(dir2, "libreprise-missing.so.3"), "libreprise-missing.so.1", EnvLibraryPath} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("the error does not name %s: %v", p, err)
		}
	}
	// The driver is looked for by its sonames, in the same order.
	d := driverSpec.candidates()
	if !slices.Equal(d[:4], []string{filepath.Join(dir1, "libcuda.so.1"), filepath.Join(dir1, "libcuda.so"),
		filepath.Join(dir2, "libcuda.so.1"), filepath.Join(dir2, "libcuda.so")}) {
		t.Errorf("driver candidates %q", d)
	}
	if !slices.Contains(d, "libcuda.so.1") || slices.Index(d, "libcuda.so.1") > slices.Index(d, "libcuda.so") {
		t.Errorf("driver candidates %q: want libcuda.so.1 before libcuda.so", d)
	}
	for _, p := range d {
		if strings.Contains(p, "stubs") {
			t.Errorf("driver candidate %s is the toolkit's stub", p)
		}
	}
}

func TestVersionOrder(t *testing.T) {
	names := []string{"libnvrtc.so.12.10", "libnvrtc.so.12", "libnvrtc.so.12.4.99", "libnvrtc.so.13"}
	slices.SortFunc(names, func(a, b string) int {
		if (byVersion{a, b}).Less(0, 1) {
			return -1
		}
		if (byVersion{a, b}).Less(1, 0) {
			return 1
		}
		return 0
	})
	want := []string{"libnvrtc.so.12", "libnvrtc.so.12.4.99", "libnvrtc.so.12.10", "libnvrtc.so.13"}
	if !slices.Equal(names, want) {
		t.Errorf("ordered %q, want %q", names, want)
	}
	for in, want := range map[string]int{"libnvrtc.so.12.4": 12, "/x/libcublas.so.13": 13, "libcublas.so": -1} {
		if got := sonameMajor(in); got != want {
			t.Errorf("sonameMajor(%q) = %d, want %d", in, got, want)
		}
	}
}

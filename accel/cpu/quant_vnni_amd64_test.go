//go:build goexperiment.simd && amd64

package cpu

import (
	"fmt"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
)

// TestQuantKernelSets: the avx512 set runs its own (VNNI) kernels exactly
// where the CPU has AVX512_VNNI, the avx2 set the AVX2 ones.
func TestQuantKernelSets(t *testing.T) {
	for _, vk := range vecSets() {
		for _, dt := range quantDTypes {
			want := vk.name == "avx512" && archsimd.X86.AVX512VNNI()
			if got := vk.quantKernels(dt) != nil; got != want {
				t.Errorf("%s %s: own kernels %v, want %v", vk.name, dt, got, want)
			}
			t.Logf("%s %s: own kernels %v", vk.name, dt, want)
		}
	}
}

// TestQuantVNNIRows: every row count from 1 to past two groups of the
// VNNI kernels' rows (each kernel, and the cut into uneven groups), at
// output counts with and without a partial last panel, one block per row
// and several, gives the plain-Go bits on every set.
func TestQuantVNNIRows(t *testing.T) {
	useQuantVec(t)
	r := rand.New(rand.NewPCG(21, 22))
	for _, dt := range quantDTypes {
		most := len(vnniQuant.kernels(dt))
		bl := dt.BlockSize()
		for T := 1; T <= 2*most+1; T++ {
			for _, sh := range [][2]int{{16, bl}, {40, 3 * bl}, {19, 256}} {
				out, in := sh[0], sh[1]
				t.Run(fmt.Sprintf("%s/T%d/%dx%d", dt, T, out, in), func(t *testing.T) {
					c, _, _ := quantCall(t, r, dt, T, out, in)
					vecEqualsPlain(t, c)
				})
			}
		}
	}
}

// TestQuantVNNINoPrefetch: with the prefetch of the next panel off (a
// device whose packed weights outgrew the last-level cache: prefetch.go)
// the VNNI kernels give the same bits as with it, many rows and one.
func TestQuantVNNINoPrefetch(t *testing.T) {
	useQuantVec(t)
	if !archsimd.X86.AVX512VNNI() {
		t.Skip("no VNNI kernels on this CPU")
	}
	r := rand.New(rand.NewPCG(23, 24))
	off := &Device{pfLimit: -1}
	if off.prefetchPanels() {
		t.Fatal("a device with limit -1 prefetches")
	}
	for _, dt := range quantDTypes {
		for _, T := range []int{1, 5, 33} {
			t.Run(fmt.Sprintf("%s/T%d", dt, T), func(t *testing.T) {
				c, _, _ := quantCall(t, r, dt, T, 40, 2*256)
				want := runQuantVecOn(t, vnniSet(t), c)
				old := vec.Load()
				defer vec.Store(old)
				vec.Store(vnniSet(t))
				got := runQuantVecK(t, c, &kctx{d: off})
				if i, ok := bitsEqual(got, want); !ok {
					t.Fatalf("row %d out %d: %g without the prefetch, %g with it", i/40, i%40, got[i], want[i])
				}
			})
		}
	}
}

// vnniSet is the avx512 kernel set (the one with the VNNI kernels).
func vnniSet(t *testing.T) *vecOps {
	t.Helper()
	for _, vk := range vecSets() {
		if vk.name == "avx512" {
			return vk
		}
	}
	t.Skip("no avx512 set on this CPU")
	return nil
}

// TestChooseSet: REPRISE_CPU_SIMD's values pick the sets they name where
// this CPU runs them, 0 none, anything else the default.
func TestChooseSet(t *testing.T) {
	if chooseSet("0") != nil {
		t.Error("0: a kernel set")
	}
	for _, env := range []string{"", "1", "sse", "AVX2"} {
		if got := chooseSet(env); got != vecBuilt && !goamd64v3 {
			t.Errorf("%q: %v, want the default", env, got.name)
		}
	}
	for _, vk := range vecSets() {
		if got := chooseSet(vk.name); got != vk {
			t.Errorf("%q: %v", vk.name, got)
		}
	}
}

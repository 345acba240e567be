//go:build goexperiment.simd && amd64 && linux

package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"
)

// guardedBytes is n zeroed bytes ending where a page that cannot be read
// begins.
func guardedBytes(t *testing.T, n int) []byte {
	page := syscall.Getpagesize()
	size := (n + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, size+page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[size:], syscall.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	return mem[size-n : size : size]
}

// TestQuantKernelsStayInActs: the vector kernels read nothing of x's
// quantized rows past the capacity quantizeActs gave them. A fresh piece's
// rows are a fresh allocation, which may end where the heap's mapped
// memory does; here they are moved to end at a page that cannot be read,
// so a read past them faults (a panic, with SetPanicOnFault) instead of
// passing unseen. The results must also be those of the rows in ordinary
// memory. Rows cover the one-row, two- and three-row and widened kernels;
// x spread for the one-row kernels (spreadRow) and Q6_K's sums (q6Pairs)
// are held the same way.
func TestQuantKernelsStayInActs(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here")
	}
	guarded := func(t *testing.T, n int) []int8 {
		g := guardedBytes(t, n)
		return unsafe.Slice((*int8)(unsafe.Pointer(&g[0])), n)
	}
	old := quantVec.Load()
	quantVec.Store(true)
	defer quantVec.Store(old)
	r := rand.New(rand.NewPCG(13, 14))
	const out, in = 16, 256
	for _, dt := range quantDTypes {
		for _, T := range []int{1, 2, 3, quantWideMin - 1, quantWideMin, quantWideMin + 1} {
			t.Run(fmt.Sprintf("%s/T%d", dt, T), func(t *testing.T) {
				c, _, _ := quantCall(t, r, dt, T, out, in)
				p := packWeights(c.o[2])
				k := &kctx{}
				quantizeActs(&k.qa, c.o[1].f32(), in, 0, T, kBlocks(dt))
				if !runMatMulQuantVec(c, &k.qa, p, 0, 1, 0, T, k) {
					t.Fatal("no vector kernel")
				}
				want := append([]float32(nil), c.o[0].f32()...)
				n := cap(k.qa.qx)
				g := guarded(t, n)
				copy(g, k.qa.qx)
				k.qa.qx = g[:len(k.qa.qx)]
				// The one-row kernels read x spread (Q8_0's split into
				// nibbles too), which runMatMulQuantVec writes into this
				// when it is long enough (one row's: the one-row kernel
				// runs at most one row of a piece).
				if sb := spreadBytes(dt, in); sb > 0 {
					k.qa.xs = guarded(t, sb)
				}
				// Q6_K's one-row kernel reads x's sums as q6Pairs, held the same way.
				cp := guardedBytes(t, 4*T*in/16)
				k.qa.cp = unsafe.Slice((*int32)(unsafe.Pointer(&cp[0])), T*in/16)
				clear(c.o[0].f32())
				func() {
					// (Per goroutine: this subtest's.)
					defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
					defer func() {
						if e := recover(); e != nil {
							t.Fatalf("a kernel read past x's %d quantized bytes (or x spread, or Q6_K's sums): %v", n, e)
						}
					}()
					runMatMulQuantVec(c, &k.qa, p, 0, 1, 0, T, k)
				}()
				if i, ok := bitsEqual(c.o[0].f32(), want); !ok {
					t.Fatalf("differs at %d: %g, in ordinary memory %g", i, c.o[0].f32()[i], want[i])
				}
			})
		}
	}
}

// TestQuantKernelsStayInPanels: the vector kernels read nothing past the
// end of W's packed panels. The last panel's end is moved to a page that
// cannot be read, so that a read past it (a read-ahead into the next
// super-block or panel, as mmQ6_K's once did into slack the pack no longer
// allocates) faults instead of passing unseen, on every kernel: one-row,
// two- and three-row, widened (whose widening reads the panel), and a
// partial last panel (24 outputs). The results must be those of the panels
// in ordinary memory.
func TestQuantKernelsStayInPanels(t *testing.T) {
	useQuantVec(t)
	r := rand.New(rand.NewPCG(17, 18))
	const out, in = 24, 256
	for _, dt := range quantDTypes {
		for _, T := range []int{1, 2, 3, 5, quantWideMin, quantWideMin + 1} {
			t.Run(fmt.Sprintf("%s/T%d", dt, T), func(t *testing.T) {
				c, _, _ := quantCall(t, r, dt, T, out, in)
				p := packWeights(c.o[2])
				k := &kctx{}
				run := func() {
					quantizeActs(&k.qa, c.o[1].f32(), in, 0, T, kBlocks(dt))
					if !runMatMulQuantVec(c, &k.qa, p, 0, p.panels, 0, T, k) {
						t.Fatal("no vector kernel")
					}
				}
				run()
				want := append([]float32(nil), c.o[0].f32()...)
				// (Panels are multiples of 32 bytes, so the copy keeps
				// every vector the kernels load 32-byte aligned, as the
				// pack does.)
				g := guardedBytes(t, len(p.data))
				copy(g, p.data)
				p.data = g
				clear(c.o[0].f32())
				func() {
					defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
					defer func() {
						if e := recover(); e != nil {
							t.Fatalf("a kernel read past the %d packed bytes: %v", len(p.data), e)
						}
					}()
					run()
				}()
				if i, ok := bitsEqual(c.o[0].f32(), want); !ok {
					t.Fatalf("differs at %d: %g, in ordinary memory %g", i, c.o[0].f32()[i], want[i])
				}
			})
		}
	}
}

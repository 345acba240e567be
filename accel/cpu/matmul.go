package cpu

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// packFor returns the packed copy of a MatMul's weights, making it when the
// cache's policy allows, or nil (row-major kernels).
func (d *Device) packFor(c *rcall) *packed {
	if !packingOn() && !(quantVec.Load() && quantPacks(c.o[2].dt)) {
		return nil
	}
	if e := (*packEntry)(atomic.LoadPointer(&c.pk)); e != nil && !e.dead.Load() {
		return e.p
	}
	e := d.packs.lookup(&c.o[2])
	atomic.StorePointer(&c.pk, unsafe.Pointer(e))
	if e == nil {
		return nil
	}
	return e.p
}

// runMatMulPacked computes output panels [lo, hi) of rows [t0, t1) of
// y = x·Wᵀ from packed W. The kernels walk a group of panels over every row,
// so a group's weights are read from memory once and from cache for the
// other rows.
//
//go:norace
func runMatMulPacked(c *rcall, p *packed, lo, hi, t0, t1 int, k *kctx) {
	vk := simdOps()
	if !vk.hasMM() {
		runMatMulPackedGo(c, p, lo, hi, t0, t1)
		return
	}
	ks, blk, row := &vk.f32, vk.blocks.f32, vk.blocks.f32Row
	if p.dt == accel.BF16 {
		ks, blk, row = &vk.bf16, vk.blocks.bf16, vk.blocks.bf16Row
	}
	R, P := blk[0], blk[1]
	y, x := c.o[0], c.o[1]
	in, out := x.cols, y.cols
	if t1 <= t0 || out == 0 || hi <= lo {
		return
	}
	if in == 0 {
		for t := t0; t < t1; t++ {
			clearF32(y.f32()[t*out+lo*panelWidth : t*out+min(hi*panelWidth, out)])
		}
		return
	}
	if err := kernelSpan(y, x, p, hi, t1); err != nil {
		panic(err)
	}
	ys, xs := uintptr(out)*4, uintptr(in)*4
	yp, xp := unsafe.Pointer(&y.b[0]), unsafe.Pointer(&x.b[0])
	full := hi
	if hi*panelWidth > out {
		full = hi - 1 // the last panel is partial
	}
	if t1-t0 == 1 {
		R, P = row[0], row[1]
	}
	// A group of panels is read from memory by its first block of rows and
	// from cache by the others. So that the first block does not wait on
	// memory, each block after it prefetches half a panel of the next
	// group (mmKernel's pf), until that group is all asked for: at 64 rows
	// and 6-row blocks, the next group's 4 panels arrive during 8 of the
	// 10 blocks left of this one. (A whole panel per block asked for them
	// faster than one core reads memory, and the first blocks still
	// waited.) Over pfMaxRows rows or more (a prefill) the first block is
	// too small a part of a group's time to be worth it.
	//
	// pfh is the next half panel to prefetch; each group's start moves it
	// past the group's own panels.
	pfh := 2 * lo
	if c.o[1].rows >= pfMaxRows {
		pfh = 2 * hi
	}
	for pn := lo; pn < full; {
		np := min(P, full-pn)
		if rest := full - pn - np; rest > 0 && rest < np-1 {
			// Split the last panels evenly (4 as 2+2, not 3+1): a block of
			// one panel has too few accumulators to hide the add latency.
			np = (full - pn + 1) / 2
		}
		wp := p.panel(pn)
		pfh = max(pfh, 2*(pn+np))
		for t := t0; t < t1; {
			nr := min(R, t1-t)
			var pf uintptr
			if t > t0 && pfh < 2*min(hi, pn+np+P) {
				pf = uintptr(wp) + uintptr(pfh-2*pn)*(p.ps/2)
				pfh++
			}
			ks[nr-1][np-1](unsafe.Add(yp, uintptr(t)*ys+uintptr(pn)*panelWidth*4), ys,
				unsafe.Add(xp, uintptr(t)*xs), xs, wp, p.ps, in, pf)
			t += nr
		}
		pn += np
	}
	if full < hi {
		wp := p.panel(full)
		c0 := full * panelWidth
		yf := y.f32()
		for t := t0; t < t1; {
			nr := min(3, t1-t)
			ks[nr-1][0](unsafe.Pointer(&k.tail[0]), panelWidth*4, unsafe.Add(xp, uintptr(t)*xs), xs, wp, p.ps, in, 0)
			for r := 0; r < nr; r++ {
				copyF32(yf[(t+r)*out+c0:(t+r+1)*out], k.tail[r*panelWidth:r*panelWidth+out-c0])
			}
			t += nr
		}
	}
}

// pfMaxRows is the rows of x (the call's, not a piece's) from which
// runMatMulPacked prefetches no panels.
const pfMaxRows = 128

// kernelSpan checks that the operands hold what the packed kernels will
// touch through raw pointers for output panels [.., hi) of rows [.., t1):
// t1 rows of x and y, and hi panels of W packed for x's input count. The
// operands come from validated tensors, so this fails only on a bug; it
// makes that bug a panic (which a stream reports as its error), as the
// plain-Go kernels' slicing does, not a read or write past the operands.
func kernelSpan(y, x operand, p *packed, hi, t1 int) error {
	in, out := x.cols, y.cols
	if len(x.b) < t1*in*4 || len(y.b) < t1*out*4 {
		return fmt.Errorf("cpu: matmul of %d rows: x holds %d bytes of [%d, %d] float32, y %d of [%d, %d]",
			t1, len(x.b), x.rows, in, len(y.b), y.rows, out)
	}
	if p.in != in || p.out != out || p.ps != packedPanelBytes(p.dt, in) || hi > p.panels || uintptr(len(p.data)) < uintptr(hi)*p.ps {
		return fmt.Errorf("cpu: matmul x [%d, %d] · Wᵀ [%d, %d]: W packed as [%d, %d] in %d panels of %d bytes (%d bytes), %d panels wanted",
			x.rows, in, out, in, p.out, p.in, p.panels, p.ps, len(p.data), hi)
	}
	return nil
}

// runMatMulPackedGo is the plain-Go kernel over packed panels (used where
// packing is forced without vector kernels, to test the cache): one chain
// per output, in input order, as every other matmul kernel.
//
//go:norace
func runMatMulPackedGo(c *rcall, p *packed, lo, hi, t0, t1 int) {
	y, x := c.o[0].f32(), c.o[1].f32()
	in, out := c.o[1].cols, c.o[0].cols
	var s [panelWidth]float32
	for pn := lo; pn < hi; pn++ {
		o0 := pn * panelWidth
		n := min(panelWidth, out-o0)
		for t := t0; t < t1; t++ {
			xr := x[t*in : (t+1)*in]
			s = [panelWidth]float32{}
			if p.dt == accel.BF16 {
				pairs := (in + 1) / 2
				w := p.u32()[pn*pairs*panelWidth : (pn+1)*pairs*panelWidth]
				for i, v := range xr {
					row := w[(i/2)*panelWidth : (i/2+1)*panelWidth]
					sh := 16 * uint(1-i&1)
					for j := range s {
						s[j] = madd(v, bf16(uint16((row[j]<<sh)>>16)), s[j])
					}
				}
			} else {
				w := p.f32()[pn*in*panelWidth : (pn+1)*in*panelWidth]
				for i, v := range xr {
					row := w[i*panelWidth : (i+1)*panelWidth]
					for j := range s {
						s[j] = madd(v, row[j], s[j])
					}
				}
			}
			copyF32(y[t*out+o0:t*out+o0+n], s[:n])
		}
	}
}

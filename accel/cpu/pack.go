package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// Packed weights.
//
// The vector matmul kernels read a weight matrix W[out, in] as panels of 16
// consecutive output rows, transposed inside the panel: for input i, the 16
// outputs' weights are one 64-byte vector, so a kernel keeps one accumulator
// lane per output and adds the products in input order, exactly the scalar
// reference's chain. bf16 panels hold, per pair of inputs (2k, 2k+1) and
// output, one uint32 with input 2k in its low half and 2k+1 in its high half:
// one 64-byte load yields 32 weights after one shift and one and. A partial
// last panel is padded with zeros (its extra lanes are computed, never
// stored); an odd input count pads the last pair's high half, which the
// kernels never read.
//
// The packed copy is a device-side representation that accel knows nothing
// about: the device keeps it in a cache keyed by (segment, offset, shape,
// dtype) of the weight tensor, made when a MatMul first uses the tensor (or
// ahead of time by PackWeights), and charged to the arena like any device
// memory. A write to any byte of the range (a kernel output, a copy, an
// upload) drops the copy before the write lands, so a re-uploaded weight is
// re-packed from its new bytes; a range written after being packed is only
// packed again after volatileUses more uses without a write, so that a
// matrix rewritten every step is not packed every step. When packing is off
// (no vector kernels in this build or on this CPU), when the arena has no
// room for the copy, or while a range is volatile, MatMul reads the row-major
// bytes with the scalar kernels: the same bits, more slowly.

// panelWidth is the number of outputs of one packed panel.
const panelWidth = 16

// volatileUses is how many uses without a write a range whose pack was
// dropped by a write needs before it is packed again.
const volatileUses = 4

// packed is one weight matrix in panel layout.
type packed struct {
	dt     accel.DType
	out    int     // rows of W
	in     int     // columns of W
	panels int     // ceil(out/16)
	ps     uintptr // bytes per panel
	data   []byte  // panels*ps bytes, 64-byte aligned (ps a multiple of 32)
	// owner keeps data mapped where it lies on huge pages outside the Go
	// heap (hugepages.go); nil where data is Go heap memory. Whoever hands
	// a raw pointer into data to a kernel keeps the *packed alive until
	// the kernel returns (runtime.KeepAlive).
	owner *hugeChunk
}

func packedPanelBytes(dt accel.DType, in int) uintptr {
	if dt.BlockSize() > 1 {
		return quantPanelBytes(dt, in)
	}
	if dt == accel.BF16 {
		return uintptr((in+1)/2) * panelWidth * 4
	}
	return uintptr(in) * panelWidth * 4
}

// panel is the address of panel p.
func (p *packed) panel(i int) unsafe.Pointer {
	return unsafe.Pointer(&p.data[uintptr(i)*p.ps])
}

func (p *packed) f32() []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&p.data[0])), len(p.data)/4)
}

func (p *packed) u32() []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(&p.data[0])), len(p.data)/4)
}

// packWeights re-lays W (F32, BF16 or a packable quantized type, row-major
// [out, in]) into panels on the Go heap.
func packWeights(w operand) *packed { return packWeightsIn(w, nil) }

// packWeightsIn is packWeights with the panels' bytes from a (nil: the Go
// heap).
//
//go:norace
func packWeightsIn(w operand, a *hugeAlloc) *packed {
	out, in := w.rows, w.cols
	p := &packed{dt: w.dt, out: out, in: in, panels: (out + panelWidth - 1) / panelWidth, ps: packedPanelBytes(w.dt, in)}
	p.data, p.owner = a.bytes(int(uintptr(p.panels) * p.ps))
	if w.dt.BlockSize() > 1 {
		packQuant(w, p)
		return p
	}
	if w.dt == accel.BF16 {
		src, dst := w.u16(), p.u32()
		pairs := (in + 1) / 2
		for o := 0; o < out; o++ {
			pan, j := o/panelWidth, o%panelWidth
			base := pan * pairs * panelWidth
			row := src[o*in : (o+1)*in]
			for k := 0; k < pairs; k++ {
				v := uint32(row[2*k])
				if 2*k+1 < in {
					v |= uint32(row[2*k+1]) << 16
				}
				dst[base+k*panelWidth+j] = v
			}
		}
		return p
	}
	src, dst := w.f32(), p.f32()
	for o := 0; o < out; o++ {
		pan, j := o/panelWidth, o%panelWidth
		base := pan * in * panelWidth
		row := src[o*in : (o+1)*in]
		for i, v := range row {
			dst[base+i*panelWidth+j] = v
		}
	}
	return p
}

type packKey struct {
	m          *mem
	off        int64
	rows, cols int
	dt         accel.DType
}

// packEntry is one cached packed copy, or (p nil) the record of a range
// whose copy a write dropped, counting its uses since the last write.
type packEntry struct {
	key    packKey
	lo, hi int64 // bytes of the segment the copy was made from
	p      *packed
	bytes  int64 // charged to the arena
	uses   int   // placeholder: uses since the last write (under mu)
	// never: a placeholder for weights the panels cannot hold (a quantized
	// block's infinite or NaN scale, quantPackable): the row-major kernels
	// read them until a write to the range (under mu).
	never bool
	dead  atomic.Bool
}

// packTable is the device's cache of packed weights.
type packTable struct {
	d     *Device
	huge  hugeAlloc // where the panels' bytes come from
	mu    sync.Mutex
	byKey map[packKey]*packEntry
	bytes atomic.Int64 // charged, all entries
	made  atomic.Int64 // packs made, ever (tests, stats)
}

func (t *packTable) init(d *Device) {
	t.d = d
	t.byKey = map[packKey]*packEntry{}
}

// lookup returns the live packed copy of w, packing it when the policy
// allows; nil means "use the row-major kernels".
func (t *packTable) lookup(w *operand) *packEntry {
	if w.m == nil || len(w.b) == 0 {
		return nil
	}
	key := packKey{m: w.m, off: w.off, rows: w.rows, cols: w.cols, dt: w.dt}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byKey[key]
	if e != nil && e.p != nil {
		return e
	}
	if e != nil {
		if e.never {
			return nil
		}
		if e.uses++; e.uses < volatileUses {
			return nil
		}
		t.removeLocked(e)
	}
	e, _ = t.makeLocked(key, w)
	return e
}

// makeLocked packs w, or (nil, nil) records that it cannot be packed.
func (t *packTable) makeLocked(key packKey, w *operand) (*packEntry, error) {
	if w.dt.BlockSize() > 1 && !quantPackable(*w) {
		e := &packEntry{key: key, lo: w.off, hi: w.off + int64(len(w.b)), never: true}
		t.addToMem(e)
		t.byKey[key] = e
		return nil, nil
	}
	size := int64(uintptr((w.rows+panelWidth-1)/panelWidth) * packedPanelBytes(w.dt, w.cols))
	if err := t.d.budget.Charge(size); err != nil {
		return nil, err
	}
	e := &packEntry{key: key, lo: w.off, hi: w.off + int64(len(w.b)), bytes: size}
	// Registered before the bytes are read: a write from here on drops it.
	t.addToMem(e)
	e.p = packWeightsIn(*w, &t.huge)
	t.byKey[key] = e
	t.bytes.Add(size)
	t.made.Add(1)
	return e, nil
}

// removeLocked forgets an entry, giving back its memory.
func (t *packTable) removeLocked(e *packEntry) {
	if e.dead.Swap(true) {
		return
	}
	delete(t.byKey, e.key)
	t.removeFromMem(e)
	if e.p != nil {
		t.d.budget.Uncharge(e.bytes)
		t.bytes.Add(-e.bytes)
	}
}

func (t *packTable) addToMem(e *packEntry) {
	m := e.key.m
	var l []*packEntry
	if old := m.packs.Load(); old != nil {
		l = append(l, (*old)...)
	}
	l = append(l, e)
	m.packs.Store(&l)
}

func (t *packTable) removeFromMem(e *packEntry) {
	m := e.key.m
	old := m.packs.Load()
	if old == nil {
		return
	}
	l := make([]*packEntry, 0, len(*old))
	for _, x := range *old {
		if x != e {
			l = append(l, x)
		}
	}
	if len(l) == 0 {
		m.packs.Store(nil)
		return
	}
	m.packs.Store(&l)
}

// written is called before bytes [off, off+n) of m are written: it drops
// every packed copy made from an overlapping range, leaving a placeholder
// that counts uses, and restarts the count of placeholders there.
func (t *packTable) written(m *mem, off, n int64) {
	if m == nil || n <= 0 {
		return
	}
	l := m.packs.Load()
	if l == nil {
		return
	}
	hit := false
	for _, e := range *l {
		if e.lo < off+n && off < e.hi {
			hit = true
			break
		}
	}
	if !hit {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l = m.packs.Load(); l == nil {
		return
	}
	for _, e := range *l {
		if e.lo >= off+n || off >= e.hi {
			continue
		}
		if e.p == nil {
			e.uses, e.never = 0, false
			continue
		}
		t.removeLocked(e)
		ph := &packEntry{key: e.key, lo: e.lo, hi: e.hi}
		t.byKey[e.key] = ph
		t.addToMem(ph)
	}
}

// dropRange forgets every entry overlapping bytes [off, off+n) of m (a
// buffer freed: its copy will not be used again).
func (t *packTable) dropRange(m *mem, off, n int64) {
	if m == nil || m.packs.Load() == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := m.packs.Load(); l != nil {
		for _, e := range *l {
			if e.lo < off+n && off < e.hi {
				t.removeLocked(e)
			}
		}
	}
}

// dropMem forgets every entry made from a segment given back to the device.
func (t *packTable) dropMem(m *mem) {
	if m.packs.Load() == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := m.packs.Load(); l != nil {
		for _, e := range *l {
			t.removeLocked(e)
		}
	}
}

// dropAll forgets every entry (device close).
func (t *packTable) dropAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.byKey {
		t.removeLocked(e)
	}
}

// PackWeights makes the packed copy of each weight tensor now, instead of at
// its first MatMul, so that the memory it takes is charged before anyone
// sizes a cache from MemInfo. Call it after the tensors' uploads have
// completed (accel.Upload waits). Tensors must be F32 or BF16 matrices in
// this device's memory. It does nothing where packing is off (see
// PackingEnabled), and fails with an error wrapping accel.ErrOutOfMemory
// where the arena has no room (MatMul then reads the row-major bytes).
func (d *Device) PackWeights(ts ...accel.Tensor) error {
	for _, tn := range ts {
		if q := tn.DType.BlockSize() > 1; (q && !(quantVec.Load() && quantPacks(tn.DType))) || (!q && !packingOn()) {
			continue // no packed form here: MatMul reads the bytes as they are
		}
		if tn.IsNil() || !ownBuffer(tn.Buf) || (tn.DType != accel.F32 && tn.DType != accel.BF16 && !quantPacks(tn.DType)) ||
			tn.Rows <= 0 || tn.Cols <= 0 || tn.Bytes() > tn.Buf.Len() {
			return fmt.Errorf("cpu: pack weights %v: %w", tn, accel.ErrInvalidArgument)
		}
		w := resolve(tn)
		key := packKey{m: w.m, off: w.off, rows: w.rows, cols: w.cols, dt: w.dt}
		t := &d.packs
		t.mu.Lock()
		e := t.byKey[key]
		var err error
		if e == nil || e.p == nil {
			if e != nil {
				t.removeLocked(e)
			}
			_, err = t.makeLocked(key, &w)
		}
		t.mu.Unlock()
		if err != nil {
			return fmt.Errorf("cpu: pack weights %v: %w", tn, err)
		}
	}
	return nil
}

// PackedBytes is the arena memory the packed weight copies hold.
func (d *Device) PackedBytes() int64 { return d.packs.bytes.Load() }

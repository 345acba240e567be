package engine

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// slotTensors holds a resource's per-slot plan buffers, allocated once per
// (bucket, slot) outside any graph pool, so the graphs that read them never
// see them move.
type slotTensors struct {
	dev  accel.Device
	bufs map[graph.SlotKey][]accel.Tensor
}

type shape struct {
	dt         accel.DType
	rows, cols int
}

func newSlotTensors(dev accel.Device) *slotTensors {
	return &slotTensors{dev: dev, bufs: map[graph.SlotKey][]accel.Tensor{}}
}

// build allocates the tensors of every spec not yet built.
func (st *slotTensors) build(label string, specs []graph.SlotSpec, shapes func(graph.SlotSpec) []shape) error {
	for _, sp := range specs {
		k := graph.SlotKey{Bucket: sp.Bucket, Slot: sp.Slot, Label: label}
		want := shapes(sp)
		if have, ok := st.bufs[k]; ok {
			for i, s := range want {
				if have[i].Rows != s.rows || have[i].Cols != s.cols {
					return fmt.Errorf("%v: buffer %d was built %dx%d, now asked %dx%d: it cannot move",
						k, i, have[i].Rows, have[i].Cols, s.rows, s.cols)
				}
			}
			continue
		}
		ts := make([]accel.Tensor, len(want))
		for i, s := range want {
			b, err := st.dev.Alloc(int64(s.rows) * int64(s.cols) * s.dt.Size())
			if err != nil {
				return fmt.Errorf("%v: %w", k, err)
			}
			ts[i] = accel.Tensor{Buf: b, DType: s.dt, Rows: s.rows, Cols: s.cols}
		}
		st.bufs[k] = ts
	}
	return nil
}

// get returns a lease's tensors, or allocates eager ones for the step.
func (st *slotTensors) get(label string, s accel.Stream, step *Step, shapes []shape) ([]accel.Tensor, error) {
	if step.Lease != nil {
		ts, ok := st.bufs[step.Lease.SlotKey(label)]
		if !ok {
			return nil, fmt.Errorf("no %s buffers built for %v slot %d", label, step.Lease.Bucket, step.Lease.Slot)
		}
		return ts, nil
	}
	ts := make([]accel.Tensor, len(shapes))
	for i, sh := range shapes {
		t, err := step.Alloc(s, sh.dt, sh.rows, sh.cols)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return ts, nil
}

// stage writes host data into t through the stager on s.
func stage(s accel.Stream, sg *accel.Stager, t accel.Tensor, data []byte) error {
	return sg.Stage(s, t.Buf.Slice(0, t.Bytes()), data)
}

// free releases every per-slot buffer.
func (st *slotTensors) free() {
	for k, ts := range st.bufs {
		for _, t := range ts {
			_ = st.dev.Free(t.Buf)
		}
		delete(st.bufs, k)
	}
}

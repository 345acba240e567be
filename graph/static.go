package graph

import (
	"errors"
	"fmt"
	"slices"

	"github.com/reprise-ml/reprise/accel"
)

// ErrCaptureOrder: a capture needs a static input larger than the one the
// first (largest) capture of its config sized.
var ErrCaptureOrder = errors.New("captures must be ordered largest first")

type staticKey struct {
	cfg  int
	name string
}

// staticBuf is one interned static input: storage sized by the largest
// capture of its config, and the axis along which smaller buckets take
// leading slices.
type staticBuf struct {
	buf        accel.Buffer
	dt         accel.DType
	rows, cols int
	axis       int // 0 rows, 1 columns, -1 fixed shape
}

// intern returns the static input views of spec's capture for in, allocating
// each (config, input) buffer on its first (largest) use.
func (r *Runner) intern(spec SlotSpec, in Inputs) (map[string]accel.Tensor, []string, error) {
	names := make([]string, 0, len(in))
	for n := range in {
		names = append(names, n)
	}
	slices.Sort(names)
	views := make(map[string]accel.Tensor, len(in))
	for _, name := range names {
		h := in[name]
		if int64(len(h.Data)) != int64(h.Rows)*int64(h.Cols)*h.DType.Size() {
			return nil, nil, fmt.Errorf("graph: %v: input %q has %d bytes for %dx%d %s", spec, name, len(h.Data), h.Rows, h.Cols, h.DType)
		}
		k := staticKey{spec.ConfigIdx, name}
		sb, ok := r.static[k]
		if !ok {
			axis := -1
			if ov, ok := spec.Config.SeqAxis[name]; ok {
				axis = ov
			} else if h.Rows == spec.Bucket.Tokens {
				axis = 0
			} else if h.Cols == spec.Bucket.Tokens {
				axis = 1
			}
			if axis == 1 && h.Rows != 1 {
				return nil, nil, fmt.Errorf("graph: %v: input %q is %dx%d: a sequence along columns needs a single row", spec, name, h.Rows, h.Cols)
			}
			buf, err := r.dev.Alloc(int64(len(h.Data)))
			if err != nil {
				return nil, nil, fmt.Errorf("graph: static input %q: %w", name, err)
			}
			sb = &staticBuf{buf: buf, dt: h.DType, rows: h.Rows, cols: h.Cols, axis: axis}
			r.static[k] = sb
		}
		v, err := sb.view(h)
		if err != nil {
			return nil, nil, fmt.Errorf("graph: %v: input %q: %w", spec, name, err)
		}
		views[name] = v
	}
	return views, names, nil
}

// view is the leading part of the storage shaped like h.
func (sb *staticBuf) view(h HostTensor) (accel.Tensor, error) {
	if h.DType != sb.dt {
		return accel.Tensor{}, fmt.Errorf("dtype %s, interned as %s", h.DType, sb.dt)
	}
	switch sb.axis {
	case -1:
		if h.Rows != sb.rows || h.Cols != sb.cols {
			return accel.Tensor{}, fmt.Errorf("shape %dx%d, interned as %dx%d with no sequence axis", h.Rows, h.Cols, sb.rows, sb.cols)
		}
	case 0:
		if h.Cols != sb.cols {
			return accel.Tensor{}, fmt.Errorf("%d columns, interned with %d", h.Cols, sb.cols)
		}
		if h.Rows > sb.rows {
			return accel.Tensor{}, fmt.Errorf("%d rows along the sequence axis, interned with %d: %w", h.Rows, sb.rows, ErrCaptureOrder)
		}
	case 1:
		if h.Rows != sb.rows {
			return accel.Tensor{}, fmt.Errorf("%d rows, interned with %d", h.Rows, sb.rows)
		}
		if h.Cols > sb.cols {
			return accel.Tensor{}, fmt.Errorf("%d columns along the sequence axis, interned with %d: %w", h.Cols, sb.cols, ErrCaptureOrder)
		}
	}
	n := int64(h.Rows) * int64(h.Cols) * h.DType.Size()
	return accel.Tensor{Buf: sb.buf.Slice(0, n), DType: h.DType, Rows: h.Rows, Cols: h.Cols}, nil
}

// stage enqueues on s the copy of h into the static view v, zeroing the part
// of v past h along the sequence axis (a packed batch shorter than its
// bucket: the tail must not carry a previous step's rows).
func (r *Runner) stage(s accel.Stream, v accel.Tensor, h HostTensor) error {
	if h.DType != v.DType || h.Rows > v.Rows || h.Cols > v.Cols || (h.Rows != v.Rows && h.Cols != v.Cols) {
		return fmt.Errorf("graph: stage a %dx%d %s input into a %v static buffer", h.Rows, h.Cols, h.DType, v)
	}
	n := int64(len(h.Data))
	if n > 0 {
		if err := r.stager.Stage(s, v.Buf.Slice(0, n), h.Data); err != nil {
			return err
		}
	}
	if n == v.Bytes() {
		return nil
	}
	tail := accel.Tensor{Buf: v.Buf.Slice(n, v.Bytes()-n), DType: v.DType, Rows: 1, Cols: int((v.Bytes() - n) / v.DType.Size())}
	l := accel.On(s)
	if v.DType == accel.I32 {
		l.FillI32(tail, 0)
	} else {
		l.FillF32(tail, 0)
	}
	return l.Err()
}

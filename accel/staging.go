package accel

import (
	"fmt"
	"sync"
)

// Stager is a ring of pinned host buffers for uploads. Each upload copies the
// caller's bytes into the next buffer of the ring and enqueues an asynchronous
// copy from it; an event recorded after the copy says when the buffer may be
// reused. Stage waits only when it comes back round to a buffer whose copy is
// still in flight, so steady-state uploads never synchronise with the device.
//
// A Stager is safe for concurrent use, but its copies are ordered only on the
// stream each call names.
type Stager struct {
	dev  Device
	mu   sync.Mutex
	ring []stageSlot
	next int
	// waits counts uploads that had to wait for a buffer still in flight.
	waits int64
}

type stageSlot struct {
	host HostBuffer
	ev   Event
}

// NewStager makes a ring of n pinned buffers of size bytes each (a buffer
// grows when an upload needs more).
func NewStager(dev Device, n int, size int64) (*Stager, error) {
	if n < 1 {
		return nil, fmt.Errorf("accel: stager needs at least one buffer, got %d: %w", n, ErrInvalidArgument)
	}
	st := &Stager{dev: dev, ring: make([]stageSlot, n)}
	for i := range st.ring {
		h, err := dev.AllocHost(size)
		if err != nil {
			st.Close()
			return nil, err
		}
		ev, err := dev.NewEvent()
		if err != nil {
			_ = dev.FreeHost(h)
			st.Close()
			return nil, err
		}
		st.ring[i] = stageSlot{host: h, ev: ev}
	}
	return st, nil
}

// Stage enqueues on s a copy of data into dst (len(data) == dst.Len()).
func (st *Stager) Stage(s Stream, dst Buffer, data []byte) error {
	if int64(len(data)) != dst.Len() {
		return fmt.Errorf("accel: stage %d bytes into a %d-byte buffer: %w", len(data), dst.Len(), ErrInvalidArgument)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	sl := &st.ring[st.next]
	st.next = (st.next + 1) % len(st.ring)
	if !sl.ev.Query() {
		st.waits++
		if err := sl.ev.Synchronize(); err != nil {
			return err
		}
	}
	if sl.host.Len() < int64(len(data)) {
		_ = st.dev.FreeHost(sl.host)
		h, err := st.dev.AllocHost(int64(len(data)))
		if err != nil {
			sl.host = HostBuffer{}
			return err
		}
		sl.host = h
	}
	h := sl.host.Slice(0, int64(len(data)))
	copy(h.Bytes(), data)
	if err := s.CopyHtoD(dst, h); err != nil {
		return err
	}
	return s.Record(sl.ev)
}

// Waits is the number of uploads that found their buffer still in flight.
func (st *Stager) Waits() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.waits
}

// Close waits for every copy in flight and frees the buffers.
func (st *Stager) Close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range st.ring {
		if st.ring[i].ev != nil {
			_ = st.ring[i].ev.Synchronize()
		}
		if !st.ring[i].host.IsNil() {
			_ = st.dev.FreeHost(st.ring[i].host)
		}
	}
	st.ring = nil
}

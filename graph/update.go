package graph

import (
	"errors"
	"fmt"

	"github.com/reprise-ml/reprise/accel"
)

// UpdateResult counts what Update did to the registered slots.
type UpdateResult struct {
	// InPlace slots had their executable updated (Exec.Update).
	InPlace int
	// Recaptured slots took a new executable instantiated from the new
	// recording, where the backend refused the update.
	Recaptured int
}

// Update re-records every registered slot's graph and updates its
// executable in place, for a node whose forward now reads other buffers of
// the same shapes (new weights, say): a replay then reads them, with no new
// instantiation. Where the backend refuses (a changed topology, or no
// in-place update), the slot takes an executable instantiated from the new
// recording instead, as a fresh capture would. Call it between steps, with
// nothing replaying. On an error the slots already done read the new
// buffers and the others the old: the caller restores the node and updates
// again, or stops replaying.
func (r *Runner) Update() (UpdateResult, error) {
	var res UpdateResult
	r.mu.Lock()
	var buckets []*Bucket
	for _, b := range r.buckets {
		buckets = append(buckets, b)
	}
	r.mu.Unlock()
	for _, b := range buckets {
		for i, s := range b.Slots {
			inPlace, err := r.updateSlot(b, i, s)
			if err != nil {
				return res, err
			}
			if inPlace {
				res.InPlace++
			} else {
				res.Recaptured++
			}
		}
	}
	return res, nil
}

// updateSlot re-records one slot as its capture did (same padding rows,
// static inputs and outputs) and takes the recording into its executable.
func (r *Runner) updateSlot(b *Bucket, idx int, s *Slot) (inPlace bool, err error) {
	spec := SlotSpec{Bucket: b.Key, Slot: idx, Config: b.Config, ConfigIdx: b.ConfigIdx}
	w := newWarmed(spec)
	w.static, w.keys = s.static, s.inputKeys
	defer r.guard(w, &err)
	if err := r.open(w); err != nil {
		return false, err
	}
	if err := r.stream.Synchronize(); err != nil {
		return false, err
	}
	g, err := r.record(w, s.outputs, r.pool)
	if err != nil {
		return false, err
	}
	if uerr := s.exec.Update(g); uerr == nil {
		old := s.graph
		s.graph = g
		old.Destroy()
		return true, nil
	} else if !errors.Is(uerr, accel.ErrTopologyChanged) && !errors.Is(uerr, accel.ErrUnsupported) {
		g.Destroy()
		return false, fmt.Errorf("graph: %v: update: %w", spec, uerr)
	}
	e, err := g.Instantiate()
	if err != nil {
		g.Destroy()
		return false, fmt.Errorf("graph: %v: instantiate: %w", spec, err)
	}
	r.log.Info("accelerator graph re-captured: the backend refused an in-place update", "runner", r.name,
		"bucket", spec.Bucket.String(), "slot", idx)
	s.exec.Destroy()
	s.graph.Destroy()
	s.exec, s.graph = e, g
	s.outside = r.execMem[b.ConfigIdx].bytes(g.Nodes(), e)
	return false, nil
}

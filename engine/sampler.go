package engine

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// SamplerName is the sampler resource's name.
const SamplerName = "sampler"

// Sampling is a request's sampling parameters.
type Sampling struct {
	// Temperature 0 is greedy (argmax).
	Temperature float32
	// TopK keeps the k most likely tokens; 0 is off.
	TopK int
	// TopP keeps the smallest set whose probability reaches p; 1 is off.
	TopP float32
	// Seed of the request's random stream.
	Seed uint64
}

// sampler is the resource holding each request's sampling parameters and
// its RNG offset, which advances by one each step, so the draw of a step
// depends only on (seed, offset) and is the same eager or replayed, alone or
// batched.
type sampler struct {
	slots *slotTensors
	reqs  map[int64]*sampState
}

type sampState struct {
	p               Sampling
	committed, next int
}

type sampRecord struct{ offset []int }

// newSampler makes the resource.
func newSampler(dev accel.Device) *sampler {
	return &sampler{slots: newSlotTensors(dev), reqs: map[int64]*sampState{}}
}

func (s *sampler) Name() string        { return SamplerName }
func (s *sampler) DependsOn() []string { return nil }

func (s *sampler) Ingest(id int64, info requestInfo) error {
	if _, dup := s.reqs[id]; dup {
		return fmt.Errorf("sampler: row %d already open", id)
	}
	s.reqs[id] = &sampState{p: info.Sampling}
	return nil
}

func (s *sampler) Remove(id int64) error { delete(s.reqs, id); return nil }

func (s *sampler) Reset(id int64, _ bool) error {
	if st, ok := s.reqs[id]; ok {
		st.committed, st.next = 0, 0
	}
	return nil
}

func (s *sampler) Admit(step *Step) (admitStatus, int) {
	rec := &sampRecord{offset: make([]int, len(step.Rows))}
	for _, r := range step.Rows {
		if _, ok := s.reqs[r.ID]; !ok {
			return admitAllocFailed, 0
		}
	}
	for i, r := range step.Rows {
		st := s.reqs[r.ID]
		rec.offset[i] = st.next
		if !atRest(r.ID, step) {
			st.next++
		}
	}
	step.State[SamplerName] = rec
	return admitOK, 0
}

func (s *sampler) Unadmit(step *Step) {
	if _, ok := step.State[SamplerName].(*sampRecord); !ok {
		return
	}
	for _, r := range step.Rows {
		if st, ok := s.reqs[r.ID]; ok && !atRest(r.ID, step) {
			st.next--
		}
	}
	delete(step.State, SamplerName)
}

// Plan writes each row's parameters; padding rows sample greedily.
func (s *sampler) Plan(st accel.Stream, sg *accel.Stager, step *Step) (any, error) {
	rec := step.State[SamplerName].(*sampRecord)
	bs := step.BatchSize()
	temp, topp := make([]float32, bs), make([]float32, bs)
	topk, seed, off := make([]int32, bs), make([]int32, 2*bs), make([]int32, bs)
	for i, r := range step.Rows {
		if graph.IsPadding(r.ID) {
			topp[i] = 1
			continue
		}
		p := s.reqs[r.ID].p
		temp[i], topk[i], topp[i] = p.Temperature, int32(p.TopK), p.TopP
		seed[2*i], seed[2*i+1] = accel.SplitSeed(p.Seed)
		off[i] = int32(rec.offset[i])
	}
	for i := len(step.Rows); i < bs; i++ {
		topp[i] = 1
	}
	ts, err := s.slots.get(SamplerName, st, step, samplerShapes(bs))
	if err != nil {
		return nil, err
	}
	for i, data := range [][]byte{accel.F32Bytes(temp), accel.I32Bytes(topk), accel.F32Bytes(topp), accel.I32Bytes(seed), accel.I32Bytes(off)} {
		if err := stage(st, sg, ts[i], data); err != nil {
			return nil, err
		}
	}
	return accel.SampleParams{Temperature: ts[0], TopK: ts[1], TopP: ts[2], Seed: ts[3], Offset: ts[4]}, nil
}

func samplerShapes(bs int) []shape {
	return []shape{{accel.F32, 1, bs}, {accel.I32, 1, bs}, {accel.F32, 1, bs}, {accel.I32, bs, 2}, {accel.I32, 1, bs}}
}

func (s *sampler) Commit(step *Step) error {
	for _, r := range step.Rows[:step.Real] {
		if st, ok := s.reqs[r.ID]; ok {
			st.committed++
		}
	}
	return nil
}

// Close frees the per-slot plan buffers.
func (s *sampler) Close() { s.slots.free() }

func (s *sampler) SupportsPrePlan() bool    { return true }
func (s *sampler) ForcesDoubleBuffer() bool { return true }
func (s *sampler) CanCapture() bool         { return true }

func (s *sampler) BuildGraphBuffers(specs []graph.SlotSpec) error {
	return s.slots.build(SamplerName, specs, func(sp graph.SlotSpec) []shape { return samplerShapes(sp.Bucket.BatchSize) })
}

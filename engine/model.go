package engine

import (
	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// ModelInfo is what the engine needs to know of a model to size its
// resources.
type ModelInfo struct {
	Name     string
	Layers   int
	KVHeads  int
	HeadSize int
	Vocab    int
	// MaxSeq is the most positions a sequence may hold.
	MaxSeq int
	// StopTokens end a request when sampled (they are not emitted).
	StopTokens []int32
	// Params and WeightBytes describe the weights on the device (WeightBytes
	// is what one forward reads, for roofline figures).
	Params      int64
	WeightBytes int64
}

// Model is the engine's view of a model: it declares its walks' graph
// configs, turns a step's rows into host inputs, and enqueues its forward.
// It never captures, allocates resource state, picks batches or touches
// streams and events beyond the Launcher it is given.
type Model interface {
	Info() ModelInfo
	// Configs are the model's graph configs: one per (walk, shape family).
	Configs() []*graph.Config
	// Preprocess turns a step's rows into the forward's static inputs,
	// sized for the step's bucket when it has a lease.
	Preprocess(step *Step) graph.Inputs
	// Forward enqueues the forward on l and returns its outputs; "next"
	// ([1, rows] I32) is the sampled token of each row.
	Forward(l *accel.Launcher, b *Batch) (map[string]accel.Tensor, error)
}

// Batch is what a forward reads: its static inputs and the resources' plans.
type Batch struct {
	Walk   string
	Lease  *graph.Lease
	Rows   int // rows in the tensors (the bucket's batch size on a lease)
	Tokens int // tokens in the tensors
	In     map[string]accel.Tensor
	Pos    accel.Tensor // [1, Tokens] I32
	KV     *KVPlan
	Sample accel.SampleParams
}

// batchFor assembles a step's batch from its inputs and plans.
func batchFor(step *Step, in map[string]accel.Tensor) *Batch {
	b := &Batch{Walk: step.Walk, Lease: step.Lease, Rows: step.BatchSize(), Tokens: step.Tokens, In: in}
	b.Pos, _ = step.Plans[PositionsName].(accel.Tensor)
	b.KV, _ = step.Plans[KVName].(*KVPlan)
	b.Sample, _ = step.Plans[SamplerName].(accel.SampleParams)
	return b
}

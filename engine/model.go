package engine

import (
	"errors"
	"fmt"

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
	// ReadBytes is how many of WeightBytes one batch-1 forward reads: a
	// token embedding that is only gathered (not the classifier too)
	// counts its one row. 0 means WeightBytes.
	ReadBytes int64
	// MatrixTypes names the weight matrices' storage on the device, by bytes,
	// most first ("q4_k, q6_k" for llama-quantize's Q4_K_M): a quantized
	// file's matrices keep their types whatever storage was asked for the
	// rest. Empty means the model does not say.
	MatrixTypes string
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
	// Forward enqueues the forward on l and returns its outputs by name;
	// OutputNext ([1, rows] I32) is the sampled token of each row.
	Forward(l *accel.Launcher, b *Batch) (map[string]accel.Tensor, error)
}

// StepModel is a model whose walks' steps do not all use every resource.
// The engine sweeps a step only through the resources its walk declares,
// and a resource that cannot be captured keeps only the walks that use it
// eager (the seed's blocked_capture_resources(step, resources)).
type StepModel interface {
	// StepResources names the resources (KVName, PositionsName,
	// SamplerName, ...) a step of walk uses; nil means all of them. A
	// resource used without one it depends on is an error at New.
	StepResources(walk string) []string
}

// Batch is what a forward reads: its static inputs and the resources' plans.
type Batch struct {
	Walk string
	// Key is the step's graph key info: the sampling variants (KeyHas
	// KeyLogProbs: the forward also writes OutLogProbs and OutLogProbIDs;
	// KeyPenalties: it processes the logits with Penalties).
	Key    string
	Lease  *graph.Lease
	Rows   int // rows in the tensors (the bucket's batch size on a lease)
	Tokens int // tokens in the tensors
	In     map[string]accel.Tensor
	Pos    accel.Tensor // [1, Tokens] I32
	KV     *KVPlan
	Sample accel.SampleParams
	// Penalties is a KeyPenalties step's logit processing (OpPenalize
	// before sampling, OpCountTokens of the sampled tokens after).
	Penalties accel.PenaltyParams

	region func(l *accel.Launcher, label string, in map[string]accel.Tensor) (*RegionResult, error)
}

// batchFor assembles a step's batch from its inputs and plans. A plan the
// step lacks stays zero (a region's step plans only the resources it reads);
// a plan of the wrong type is an error.
func batchFor(step *Step, in map[string]accel.Tensor) (*Batch, error) {
	b := &Batch{Walk: step.Walk, Key: step.Key, Lease: step.Lease, Rows: step.BatchSize(), Tokens: step.Tokens, In: in}
	var errs [4]error
	b.Pos, _, errs[0] = PositionsPlan.Lookup(step)
	b.KV, _, errs[1] = KVCachePlan.Lookup(step)
	b.Sample, _, errs[2] = SamplerPlan.Lookup(step)
	b.Penalties, _, errs[3] = PenaltiesPlan.Lookup(step)
	return b, errors.Join(errs[:]...)
}

// Region is an inner part of a walk's forward that the engine may capture on
// its own (piecewise) while the rest of the forward stays eager: the
// transformer block loop of a prefill, say, whose preamble (the embedding)
// and tail (the logits of each row's last token and sampling) vary with the
// prompts in ways whole-step buckets would pad heavily.
type Region struct {
	// Label names the region; the model's forward runs it with
	// Batch.RunRegion(l, label, inputs).
	Label string
	// Walk is the outer walk whose forward runs the region.
	Walk string
	// Config is the region's shapes. Its Walk names the region's buckets and
	// must differ from every real walk (resources key per-slot state on it).
	Config *graph.Config
	// Resources are the names of the resources the region reads (planned
	// into the region's own per-slot buffers); the others stay with the
	// eager step around it.
	Resources []string
	// Inputs are a capture's dummy inputs for a step of the region's shape
	// (host tensors with the region's input names).
	Inputs func(step *Step) graph.Inputs
	// CanLease, if set, says whether a step of these real rows may replay
	// the region (false: it runs eager, though a shape fits); nil is yes.
	CanLease func(rows []graph.Row) bool
	// LeaseBeforeStep takes the region's slot and plans its resources when
	// the step around it is prepared (declare, admit, plan), not inside the
	// forward: the region's plan is made ahead, as decode's next step's is,
	// on the region runner's plan stream while the step's eager work runs,
	// and the forward only stages and replays (the replay waits on the
	// plan's event).
	LeaseBeforeStep bool
}

// RegionModel is a model with regions. RegionForward runs a region on a
// batch whose In holds the region's inputs; it must not write its inputs and
// returns fresh outputs (allocated on l).
type RegionModel interface {
	Regions() []Region
	RegionForward(l *accel.Launcher, label string, b *Batch) (map[string]accel.Tensor, error)
}

// RegionResult is a region's outputs, of the real length. Release them, in
// stream order, once read.
type RegionResult struct {
	Out   map[string]accel.Tensor
	owned []accel.Tensor // eager outputs, freed by Release
}

// Release frees what the region allocated (nothing for a replay, whose
// outputs are the runner's static buffers).
func (r *RegionResult) Release(l *accel.Launcher) { l.Free(r.owned...) }

// RunRegion runs a region of the batch's forward: it replays the region's
// graph when a shape fits, else runs it eagerly. in are the region's inputs
// as device tensors of the step's real length.
func (b *Batch) RunRegion(l *accel.Launcher, label string, in map[string]accel.Tensor) (*RegionResult, error) {
	if b.region == nil {
		return nil, fmt.Errorf("engine: batch of walk %s has no region runner", b.Walk)
	}
	return b.region(l, label, in)
}

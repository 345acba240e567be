package graph

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
)

// BucketKey is one captured shape: (walk, batch size, tokens, key info).
type BucketKey struct {
	Walk      string
	BatchSize int
	Tokens    int
	Key       string
}

func (k BucketKey) String() string {
	return fmt.Sprintf("%s[bs=%d,tokens=%d,key=%s]", k.Walk, k.BatchSize, k.Tokens, k.Key)
}

// SlotSpec describes one capture: a bucket, a double-buffer slot, and the
// config it came from.
type SlotSpec struct {
	Bucket    BucketKey
	Slot      int
	Config    *Config
	ConfigIdx int
}

func (s SlotSpec) String() string { return fmt.Sprintf("%v/slot%d", s.Bucket, s.Slot) }

// specKey identifies a spec in maps (a SlotSpec holds a pointer to its config).
type specKey struct {
	bucket BucketKey
	slot   int
}

func (s SlotSpec) key() specKey { return specKey{s.Bucket, s.Slot} }

// SlotKey keys per-slot state that resources keep for a capture.
type SlotKey struct {
	Bucket BucketKey
	Slot   int
	Label  string
}

// Row is one request's part of a step.
type Row struct {
	// ID is the request's id (>= 0) or a padding row's handle (< -1).
	ID int64
	// Tokens are the step's input tokens for the row: one per decode step,
	// the prompt (or a chunk of it) in prefill; a packed padding row has none.
	Tokens []int32
}

// HostTensor is a preprocessed step input on the host, rows x cols elements
// of DType, little-endian.
type HostTensor struct {
	DType accel.DType
	Rows  int
	Cols  int
	Data  []byte
}

// Dim is the size of axis 0 (rows) or 1 (cols).
func (h HostTensor) Dim(axis int) int {
	if axis == 0 {
		return h.Rows
	}
	return h.Cols
}

// HostI32 makes a one-row I32 host tensor.
func HostI32(v []int32) HostTensor {
	return HostTensor{DType: accel.I32, Rows: 1, Cols: len(v), Data: accel.I32Bytes(v)}
}

// Inputs are a step's preprocessed inputs by name: what a graph reads from
// its static input buffers.
type Inputs map[string]HostTensor

// Lease is the bucket and slot a step replays on. Bucket names the capture
// walk (resources key their per-slot state on it), not the alias the step
// asked for.
type Lease struct {
	Bucket BucketKey
	Slot   int
	// Capture is set on the steps of a capture (warm-ups, the capture, its
	// golden replay): resources may give padding rows capture-time storage.
	Capture bool

	cfg    *Config
	cfgIdx int
}

// Config is the config the lease's bucket came from.
func (l *Lease) Config() *Config { return l.cfg }

// SlotKey is the lease's per-slot state key for label.
func (l *Lease) SlotKey(label string) SlotKey {
	return SlotKey{Bucket: l.Bucket, Slot: l.Slot, Label: label}
}

// Packed reports whether the lease replays a packed capture.
func (l *Lease) Packed() bool { return l.cfg != nil && l.cfg.Packed != nil }

// Node is the engine's side of a runner: the resources and model of one
// captured submodule. The runner drives it to capture; the engine drives the
// same methods to step.
type Node interface {
	// DoubleBuffer reports whether some resource supports pre-planning or
	// forces a double buffer, which is when buckets need two slots.
	DoubleBuffer() bool
	// Blocked lists the resources of cfg's step that cannot be captured.
	Blocked(cfg *Config) []string
	// BuildGraphBuffers claims every buffer the specs' captures will read,
	// given all of them, largest first, before any runner captures. It may be
	// called again with more specs; it never moves a buffer it already gave.
	BuildGraphBuffers(specs []SlotSpec) error
	// IngestPadding opens padding rows in every resource, once per handle.
	IngestPadding(ids []int64) error
	// ResetPadding returns padding rows to rest (length and position 0); with
	// free it also releases any storage they hold.
	ResetPadding(ids []int64, free bool) error
	// Prepare declares, admits and plans a step of rows (padded to the
	// lease's bucket when lease is not nil) with the plan's device writes
	// enqueued on s, and returns the step's preprocessed inputs.
	Prepare(s accel.Stream, lease *Lease, rows []Row) (Inputs, error)
	// Forward enqueues the forward on l's stream, reading in (the static
	// inputs) and the lease's plan buffers, and returns its outputs.
	Forward(l *accel.Launcher, lease *Lease, in map[string]accel.Tensor) (map[string]accel.Tensor, error)
}

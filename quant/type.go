package quant

import (
	"errors"
	"fmt"
)

// Type is a ggml tensor type id, as GGUF files store it.
type Type uint32

// ggml's type ids (ggml.h's enum ggml_type). Only the ones reprise reads
// have names here; ids 4 and 5 (the removed Q4_2, Q4_3) and the i-quants
// are unknown to this package.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	BF16 Type = 30
)

// QK is the block size of the legacy quantizations (Q4_0 ... Q8_1), QKK the
// super-block size of the K-quants.
const (
	QK  = 32
	QKK = 256
)

// ErrUnknownType is returned for a type id this package does not know.
var ErrUnknownType = errors.New("quant: unknown tensor type")

// ErrUnsupported is returned for an operation a known type does not support
// here (say, dequantising Q8_1, which ggml only uses for activations).
var ErrUnsupported = errors.New("quant: unsupported for this type")

// ErrBlocks is returned when an element count is not a whole number of
// blocks, or a byte slice is not the size its elements need.
var ErrBlocks = errors.New("quant: not a whole number of blocks")

type typeInfo struct {
	name  string
	block int // elements per block
	bytes int // bytes per block
}

var types = map[Type]typeInfo{
	F32:  {"F32", 1, 4},
	F16:  {"F16", 1, 2},
	BF16: {"BF16", 1, 2},
	Q4_0: {"Q4_0", QK, 2 + QK/2},
	Q4_1: {"Q4_1", QK, 4 + QK/2},
	Q5_0: {"Q5_0", QK, 2 + 4 + QK/2},
	Q5_1: {"Q5_1", QK, 4 + 4 + QK/2},
	Q8_0: {"Q8_0", QK, 2 + QK},
	Q8_1: {"Q8_1", QK, 4 + QK},
	Q2_K: {"Q2_K", QKK, QKK/16 + QKK/4 + 4},
	Q3_K: {"Q3_K", QKK, QKK/8 + QKK/4 + 12 + 2},
	Q4_K: {"Q4_K", QKK, 4 + 12 + QKK/2},
	Q5_K: {"Q5_K", QKK, 4 + 12 + QKK/8 + QKK/2},
	Q6_K: {"Q6_K", QKK, QKK/2 + QKK/4 + QKK/16 + 2},
	Q8_K: {"Q8_K", QKK, 4 + QKK + QKK/16*2},
}

// Known reports whether t is a type this package knows.
func (t Type) Known() bool { _, ok := types[t]; return ok }

func (t Type) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType is the inverse of String, case-insensitive ("q4_k", "Q4_K").
func ParseType(s string) (Type, error) {
	for t, ti := range types {
		if equalFold(ti.name, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w %q", ErrUnknownType, s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// BlockSize is the number of elements in one block of t (1 for the float
// types), 0 for an unknown type.
func (t Type) BlockSize() int { return types[t].block }

// BlockBytes is the size in bytes of one block of t, 0 for an unknown type.
func (t Type) BlockBytes() int { return types[t].bytes }

// Quantized reports whether t is a block-quantized type (not F32, F16, BF16).
func (t Type) Quantized() bool { return t.BlockSize() > 1 }

// RowBytes is the storage of n elements of type t. n must be a non-negative
// whole number of t's blocks.
func RowBytes(t Type, n int64) (int64, error) {
	ti, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrUnknownType, uint32(t))
	}
	if n < 0 || n%int64(ti.block) != 0 {
		return 0, fmt.Errorf("%s: %d elements are not whole blocks of %d: %w", ti.name, n, ti.block, ErrBlocks)
	}
	nb := n / int64(ti.block)
	if nb > (1<<62)/int64(ti.bytes) {
		return 0, fmt.Errorf("%s: %d elements overflow: %w", ti.name, n, ErrBlocks)
	}
	return nb * int64(ti.bytes), nil
}

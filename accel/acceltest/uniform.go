package acceltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// UniformCases are (seed, offset) pairs for checking a device's generator
// against accel.SampleUniform: edge cases first, then random ones. Seeds
// holds the seeds as a [N, 2] I32 tensor holds them (accel.SplitSeed),
// Offsets the offsets as a [1, N] one.
type UniformCases struct {
	Seeds   []int32
	Offsets []int32
	seeds   []uint64
}

// NewUniformCases makes n cases (n >= 8).
func NewUniformCases(n int) UniformCases {
	r := rand.New(rand.NewPCG(5, 6))
	c := UniformCases{Seeds: make([]int32, 2*n), Offsets: make([]int32, n), seeds: make([]uint64, n)}
	for i := 0; i < n; i++ {
		var seed uint64
		var off uint32
		switch {
		case i < 8: // edges
			seed = []uint64{0, 1, math.MaxUint64, 1 << 63, 42, 0x9E3779B97F4A7C15, 7, 12345}[i]
			off = []uint32{0, math.MaxUint32, 1, 0, 7, math.MaxUint32 - 1, 1 << 31, 3}[i]
		default:
			seed, off = r.Uint64(), r.Uint32()
		}
		c.Seeds[2*i], c.Seeds[2*i+1] = accel.SplitSeed(seed)
		c.Offsets[i] = int32(off)
		c.seeds[i] = seed
	}
	return c
}

// Check compares what a device's test kernel drew for each case, three
// words a case (the 53-bit draw's low and high 32 bits, then the float32
// draw's bits), with accel.SampleUniform, bit for bit.
func (c UniformCases) Check(t testing.TB, device string, got []int32) {
	t.Helper()
	if len(got) != 3*len(c.seeds) {
		t.Fatalf("%s drew %d words for %d cases, want 3 a case", device, len(got), len(c.seeds))
	}
	for i, seed := range c.seeds {
		off := uint32(c.Offsets[i])
		bits53 := uint64(uint32(got[3*i])) | uint64(uint32(got[3*i+1]))<<32
		u := accel.SampleUniform(seed, off)
		if g := float64(bits53) / (1 << 53); g != u {
			t.Fatalf("seed %#x offset %d: %s draws %v, accel.SampleUniform %v", seed, off, device, g, u)
		}
		if f := math.Float32frombits(uint32(got[3*i+2])); f != float32(u) {
			t.Fatalf("seed %#x offset %d: %s float draw %v, float32(SampleUniform) %v", seed, off, device, f, float32(u))
		}
	}
}

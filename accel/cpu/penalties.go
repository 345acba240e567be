package cpu

import (
	"math"
	"math/bits"

	"github.com/reprise-ml/reprise/accel"
)

func init() {
	kernels[accel.OpPenalize] = kernel{func(c *rcall) (int, int) { return c.o[1].rows, c.o[1].cols * 4 }, runPenalize, footPenalize}
	kernels[accel.OpCountTokens] = kernel{func(c *rcall) (int, int) { return 1, c.o[1].rows }, runCountTokens, footCountTokens}
}

// runPenalize: per row, accel.Penalize on every logit of a row with a pool
// row (a copy otherwise), then min_p against the processed row's maximum,
// the exponential in float64. A row flagged accel.PenaltyNoBias reads the
// worker's zero row (kctx.zeros, in its cache from the last step) for its
// bias, not the pool's: the same values, without the pool row's traffic.
//
//go:norace
func runPenalize(c *rcall, lo, hi int, kc *kctx) {
	out, logits, counts, bias := c.o[0].f32(), c.o[1].f32(), c.o[2].i32(), c.o[3].f32()
	rows, params, temp := c.o[4].i32(), c.o[5].f32(), c.o[6].f32()
	v, n := c.o[1].cols, c.o[2].rows
	for r := lo; r < hi; r++ {
		x, y := logits[r*v:(r+1)*v], out[r*v:(r+1)*v]
		p := params[4*r : 4*r+4]
		if i := int(rows[2*r]); i >= 0 && i < n {
			f, br := rows[2*r+1], bias[i*v:(i+1)*v]
			if f&accel.PenaltyNoBias != 0 {
				if kc == nil {
					kc = &kctx{}
				}
				if len(kc.zeros) < v {
					kc.zeros = make([]float32, v)
				}
				br = kc.zeros[:v]
			}
			penalizeRow(y, x, counts[i*v:(i+1)*v], br, p[0], p[1], p[2], f&accel.PenaltyMaskStops != 0)
		} else if &x[0] != &y[0] {
			// A loop, not copy: the runtime's copy reports to the race
			// detector even here, and a one-row call runs on every worker
			// (replicated), each writing the same values.
			for j, z := range x {
				y[j] = z
			}
		}
		if minP, t := p[3], temp[r]; minP > 0 && t > 0 {
			minPRow(y, minP, t)
		}
	}
}

// penalizeRow is accel.Penalize over a row. Most of a row's tokens were
// never seen and are no stop token (a zero count word): for those
// Penalize adds the bias and subtracts frequency × 0, which is what the
// short path does, operation for operation (x - freq·0 keeps the sign
// rules of a zero result), so the results are the same bits. The vector
// kernel takes the short path on every token of a block of 64 and marks
// those with a count word, which Penalize then redoes.
//
//go:norace
func penalizeRow(y, x []float32, cr []int32, br []float32, rep, pres, freq float32, mask bool) {
	f0 := freq * 0
	cr, br, x = cr[:len(y)], br[:len(y)], x[:len(y)]
	if lpVecOn() {
		for b := 0; b < len(y); b += 64 {
			e := min(len(y), b+64)
			for m := penalizeShortVec(y[b:e], x[b:e], cr[b:e], br[b:e], f0); m != 0; m &= m - 1 {
				j := b + bits.TrailingZeros64(m)
				y[j] = accel.Penalize(x[j], cr[j], br[j], rep, pres, freq, mask)
			}
		}
		return
	}
	for j, c := range cr {
		if c == 0 {
			y[j] = x[j] + br[j] - f0
		} else {
			y[j] = accel.Penalize(x[j], c, br[j], rep, pres, freq, mask)
		}
	}
}

// minPMargin bounds how far from log(min_p) an exponent a = (z-max)/t
// must lie for a < log(min_p) to decide exp(a) < min_p the way
// math.Exp(a) < min_p does: math.Exp and math.Log are within a few units in
// the last place (2^-52 relative), log(min_p) of a float32 min_p in (0, 1]
// lies in [-104, 0], so an absolute 1e-9 is far outside any rounding.
const minPMargin = 1e-9

// minPRow sets to -Inf the logits of y whose probability at temperature t
// is below minP times the largest's: math.Exp((z-max)/t) < minP, in
// float64. Only an exponent within minPMargin of log(minP) is
// exponentiated; the others are decided by comparing it with log(minP),
// which gives the same answer (NaN and -Inf exponents included). The
// vector kernel compares the float32 quotients (z-max)/t, which it computes
// as the scalar code does, with the float32 bounds that decide the same
// (minPBounds), and marks those within them for the scalar code.
//
//go:norace
func minPRow(y []float32, minP, t float32) {
	vec := lpVecOn()
	var vk *vecOps
	if vec {
		vk = simdOps()
	}
	m := rowMax(y, vk)
	p := float64(minP)
	lp := math.Log(p)
	below, above := lp-minPMargin, lp+minPMargin
	if vec {
		lo, hi := minPBounds(below, above)
		for b := 0; b < len(y); b += 64 {
			for u := minPVec(y[b:min(len(y), b+64)], m, t, lo, hi); u != 0; u &= u - 1 {
				j := b + bits.TrailingZeros64(u)
				if a := float64((y[j] - m) / t); a < below || (a <= above && math.Exp(a) < p) {
					y[j] = float32(math.Inf(-1))
				}
			}
		}
		return
	}
	for j, z := range y {
		if a := float64((z - m) / t); a < below || (a <= above && math.Exp(a) < p) {
			y[j] = float32(math.Inf(-1))
		}
	}
}

// minPBounds are the float32 bounds of min_p's test: for a float32 d,
// float64(d) < below exactly where d < lo (lo the least float32 at least
// below), and float64(d) <= above where d <= hi (hi the largest float32 at
// most above).
func minPBounds(below, above float64) (lo, hi float32) {
	lo, hi = float32(below), float32(above)
	if float64(lo) < below {
		lo = math.Nextafter32(lo, float32(math.Inf(1)))
	}
	if float64(hi) > above {
		hi = math.Nextafter32(hi, float32(math.Inf(-1)))
	}
	return lo, hi
}

//go:norace
func runCountTokens(c *rcall, _, _ int, _ *kctx) {
	counts, rows, toks := c.o[0].i32(), c.o[1].i32(), c.o[2].i32()
	v, n := c.o[0].cols, c.o[0].rows
	for r := 0; r < c.o[1].rows; r++ {
		i, t := int(rows[2*r]), int(toks[r])
		if i >= 0 && i < n && t >= 0 && t < v {
			counts[i*v+t]++
		}
	}
}

func footPenalize(c *rcall, lo, hi int, f *footprint) {
	f.read(rowsOf(&c.o[1], lo, hi))
	f.readAll(&c.o[2]) // the pool rows are the data's choice
	f.readAll(&c.o[3])
	f.read(rowsOf(&c.o[4], lo, hi))
	f.read(rowsOf(&c.o[5], lo, hi))
	f.read(elemsOf(&c.o[6], lo, hi))
	f.write(rowsOf(&c.o[0], lo, hi))
}

func footCountTokens(c *rcall, _, _ int, f *footprint) {
	f.readAll(&c.o[0]) // read and written: never replicated
	f.readAll(&c.o[1])
	f.readAll(&c.o[2])
	f.write(rowsOf(&c.o[0], 0, c.o[0].rows))
}

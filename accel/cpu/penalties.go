package cpu

import (
	"math"

	"github.com/reprise-ml/reprise/accel"
)

func init() {
	kernels[accel.OpPenalize] = kernel{func(c *rcall) (int, int) { return c.o[1].rows, c.o[1].cols * 4 }, runPenalize, footPenalize}
	kernels[accel.OpCountTokens] = kernel{func(c *rcall) (int, int) { return 1, c.o[1].rows }, runCountTokens, footCountTokens}
}

// runPenalize: per row, accel.Penalize on every logit of a row with a pool
// row (a copy otherwise), then min_p against the processed row's maximum,
// the exponential in float64.
//
//go:norace
func runPenalize(c *rcall, lo, hi int, _ *kctx) {
	out, logits, counts, bias := c.o[0].f32(), c.o[1].f32(), c.o[2].i32(), c.o[3].f32()
	rows, params, temp := c.o[4].i32(), c.o[5].f32(), c.o[6].f32()
	v, n := c.o[1].cols, c.o[2].rows
	for r := lo; r < hi; r++ {
		x, y := logits[r*v:(r+1)*v], out[r*v:(r+1)*v]
		p := params[4*r : 4*r+4]
		if i := int(rows[2*r]); i >= 0 && i < n {
			cr, br := counts[i*v:(i+1)*v], bias[i*v:(i+1)*v]
			mask := rows[2*r+1]&accel.PenaltyMaskStops != 0
			for j := range y {
				y[j] = accel.Penalize(x[j], cr[j], br[j], p[0], p[1], p[2], mask)
			}
		} else if &x[0] != &y[0] {
			// A loop, not copy: the runtime's copy reports to the race
			// detector even here, and a one-row call runs on every worker
			// (replicated), each writing the same values.
			for j, z := range x {
				y[j] = z
			}
		}
		minP, t := p[3], temp[r]
		if !(minP > 0) || !(t > 0) {
			continue
		}
		m := y[0]
		for _, z := range y {
			if z > m {
				m = z
			}
		}
		for j, z := range y {
			if math.Exp(float64((z-m)/t)) < float64(minP) {
				y[j] = float32(math.Inf(-1))
			}
		}
	}
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

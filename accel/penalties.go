package accel

import (
	"fmt"
	"math"
)

// The counts pool OpPenalize reads and OpCountTokens writes holds, per
// request row and vocabulary token, one I32: the times the token was
// sampled (the low bits, PenaltyCountMask), whether it is in the prompt
// (PenaltyPromptBit) and whether it stops the request (PenaltyStopBit,
// masked while the row's flags carry PenaltyMaskStops: min_tokens).
const (
	PenaltyCountMask = 1<<29 - 1
	PenaltyStopBit   = 1 << 29
	PenaltyPromptBit = 1 << 30
	// PenaltyMaskStops in a row's flags (rows[r,1]) masks its stop tokens.
	PenaltyMaskStops = 1
	// PenaltyNoBias in a row's flags says its bias row is all zero (no
	// logit_bias): a kernel may then skip reading it, the pool's largest
	// per-step read besides the counts. A row with a bias must not carry
	// it.
	PenaltyNoBias = 2
)

// Penalize is OpPenalize's arithmetic for one logit x of a row with a pool
// row, in float32, in vLLM's order: a stop token is -Inf while masked, then
// the bias is added; a token seen (in the prompt or sampled) is divided by
// the repetition penalty rep when positive, multiplied by it otherwise;
// then frequency × count and presence × [count > 0] are subtracted. With
// rep 1 and the rest 0 a logit passes unchanged (but for -0, which becomes
// +0). Min_p comes after, over the row: a token whose probability at the
// row's temperature t > 0 is below min_p times the largest,
// exp((x - max)/t) < min_p, becomes -Inf.
func Penalize(x float32, c int32, bias, rep, pres, freq float32, mask bool) float32 {
	n := c & PenaltyCountMask
	if mask && c&PenaltyStopBit != 0 {
		x = float32(math.Inf(-1))
	}
	x += bias
	if n > 0 || c&PenaltyPromptBit != 0 {
		if x > 0 {
			x /= rep
		} else {
			x *= rep
		}
	}
	x -= freq * float32(n)
	if n > 0 {
		x -= pres
	}
	return x
}

// PenaltyParams are OpPenalize's operands besides the logits.
type PenaltyParams struct {
	// Counts [N,V] I32 and Bias [N,V] F32 are the pool; Rows [R,2] I32 each
	// row's pool row and flags; Params [R,4] F32 its repetition, presence,
	// frequency and min_p; Temperature (R, F32) its sampling temperature.
	Counts, Bias, Rows, Params, Temperature Tensor
}

// Penalize processes each row of logits into out (which may be logits);
// see OpPenalize.
func (l *Launcher) Penalize(out, logits Tensor, p PenaltyParams) {
	l.launch(OpPenalize, out, logits, p.Counts, p.Bias, p.Rows, p.Params, p.Temperature)
	l.run()
}

// CountTokens adds each row's token to its pool row; see OpCountTokens.
func (l *Launcher) CountTokens(counts, rows, tokens Tensor) {
	l.launch(OpCountTokens, counts, rows, tokens)
	l.run()
}

func checkPenalize(c *Call) error {
	out, logits, counts, bias, rows, params, temp := c.T[0], c.T[1], c.T[2], c.T[3], c.T[4], c.T[5], c.T[6]
	if err := firstErr(want(out, "out", F32), want(logits, "logits", F32), want(counts, "counts", I32), want(bias, "bias", F32),
		want(rows, "rows", I32), want(params, "params", F32), want(temp, "temperature", F32)); err != nil {
		return err
	}
	r, v := logits.Rows, logits.Cols
	if v == 0 || out.Rows != r || out.Cols != v || counts.Cols != v || bias.Rows != counts.Rows || bias.Cols != v ||
		rows.Rows != r || rows.Cols != 2 || params.Rows != r || params.Cols != 4 || temp.Len() != r {
		return fmt.Errorf("out %v, logits %v, counts %v, bias %v, rows %v, params %v, temperature %v",
			out, logits, counts, bias, rows, params, temp)
	}
	if out.Buf.Overlaps(logits.Buf) && out.Buf != logits.Buf {
		return fmt.Errorf("out partly overlaps the logits")
	}
	for _, in := range []Tensor{counts, bias, rows, params, temp} {
		if out.Buf.Overlaps(in.Buf) {
			return fmt.Errorf("out overlaps an input")
		}
	}
	return nil
}

func checkCountTokens(c *Call) error {
	counts, rows, toks := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(counts, "counts", I32), want(rows, "rows", I32), want(toks, "tokens", I32)); err != nil {
		return err
	}
	if counts.Cols == 0 || rows.Cols != 2 || toks.Len() != rows.Rows {
		return fmt.Errorf("counts %v, rows %v, tokens %v", counts, rows, toks)
	}
	if counts.Buf.Overlaps(rows.Buf) || counts.Buf.Overlaps(toks.Buf) {
		return fmt.Errorf("counts overlap an input")
	}
	return nil
}

package engine

import (
	"fmt"
	"strings"

	"github.com/reprise-ml/reprise/accel"
)

// Log probabilities are a sampling variant: a step whose rows ask for none
// runs (and replays) the plain graph; a step with one row that asks runs
// the model's KeyLogProbs variant, whose forward also writes each row's
// scores (OpLogProbs) into two more outputs. A model that declares no
// KeyLogProbs config serves such steps eager.
const (
	// KeyLogProbs is the graph key info of the variant that scores tokens.
	KeyLogProbs = "logprobs"
	// MaxTopLogProbs is the most alternatives a request may ask for, and
	// the k every KeyLogProbs forward computes.
	MaxTopLogProbs = 20
	// OutLogProbs ([rows, MaxTopLogProbs+1] F32: the sampled token's
	// log-probability, then the top ones') and OutLogProbIDs ([rows,
	// MaxTopLogProbs] I32: their tokens) are the variant's outputs.
	OutLogProbs   = "logprobs"
	OutLogProbIDs = "logprob_ids"
)

// TokenLogProb is a token and its log-probability under the model's raw
// distribution (the log-softmax of its logits, before temperature or any
// other processing, as vLLM reports by default).
type TokenLogProb struct {
	Token   int32
	LogProb float32
}

// KeyLogProbsPenalties is the key info of a step whose rows ask for both.
const KeyLogProbsPenalties = KeyLogProbs + "+" + KeyPenalties

// samplingKey is the graph key info a step of these requests needs: the
// sampling variants any of them asks for, in KeyHas's form.
func samplingKey(reqs []*request) string {
	var lp, pen bool
	for _, r := range reqs {
		lp = lp || r.req.LogProbs
		pen = pen || r.req.Penalties.On()
	}
	switch {
	case lp && pen:
		return KeyLogProbsPenalties
	case lp:
		return KeyLogProbs
	case pen:
		return KeyPenalties
	}
	return ""
}

// KeyHas reports whether graph key info key has the variant v: key is
// the variants a step needs, joined by "+" in a fixed order (KeyLogProbs,
// KeyPenalties, KeyLogProbsPenalties).
func KeyHas(key, v string) bool {
	for len(key) > 0 {
		i := strings.IndexByte(key, '+')
		if i < 0 {
			return key == v
		}
		if key[:i] == v {
			return true
		}
		key = key[i+1:]
	}
	return false
}

// stepScores are the last step's log probabilities, by request: loop-owned.
// Its buffers (host and decoded) are kept from step to step, so that a
// step with log probabilities allocates nothing to read them.
type stepScores struct {
	ok   bool // the last step's, else none
	k    int
	vals []float32
	ids  []int32
	row  map[int64]int
	host accel.HostBuffer // pinned; grown as needed, freed by Close
	dev  accel.Device
}

// readScores reads a KeyLogProbs step's scores for its n real rows (and
// forgets the last step's otherwise): both outputs copied into one pinned
// buffer and waited for once.
func (e *Engine) readScores(s accel.Stream, key string, outs map[string]accel.Tensor, reqs []*request, n int) error {
	sc := &e.scores
	sc.ok = false
	if !KeyHas(key, KeyLogProbs) {
		return nil
	}
	vt, it := outs[OutLogProbs], outs[OutLogProbIDs]
	if vt.IsNil() || it.IsNil() || vt.Rows < n || it.Rows < n || vt.Cols != it.Cols+1 {
		return fmt.Errorf("engine: a %s step's forward gave no %d-row %q and %q outputs (got %v, %v)", KeyLogProbs, n, OutLogProbs, OutLogProbIDs, vt, it)
	}
	vb, ib := vt.RowSlice(0, n).Bytes(), it.RowSlice(0, n).Bytes()
	if sc.host.Len() < vb+ib {
		if sc.dev != nil {
			_ = sc.dev.FreeHost(sc.host)
			sc.dev, sc.host = nil, accel.HostBuffer{}
		}
		h, err := e.dev.AllocHost(vb + ib)
		if err != nil {
			return fmt.Errorf("engine: log probabilities' read-back buffer: %w", err)
		}
		sc.dev, sc.host = e.dev, h
	}
	hv, hi := sc.host.Slice(0, vb), sc.host.Slice(vb, ib)
	if err := s.CopyDtoH(hv, vt.Buf.Slice(0, vb)); err != nil {
		return err
	}
	if err := s.CopyDtoH(hi, it.Buf.Slice(0, ib)); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	sc.vals = accel.AppendBytesF32(sc.vals[:0], hv.Bytes())
	sc.ids = accel.AppendBytesI32(sc.ids[:0], hi.Bytes())
	sc.k = it.Cols
	if sc.row == nil {
		sc.row = make(map[int64]int, n)
	} else {
		clear(sc.row)
	}
	for i, r := range reqs[:n] {
		sc.row[r.id] = i
	}
	sc.ok = true
	return nil
}

// close frees the read-back buffer.
func (sc *stepScores) close() {
	if sc.dev != nil {
		_ = sc.dev.FreeHost(sc.host)
	}
	*sc = stepScores{}
}

// output is the Output of a token sampled for r in the last step: with
// its log-probability and the top ones when r asked.
func (e *Engine) output(r *request, tok int32) Output {
	o := Output{Token: tok}
	i, ok := e.scores.row[r.id]
	if !r.req.LogProbs || !e.scores.ok || !ok {
		return o
	}
	k := e.scores.k
	o.LogProb, o.HasLogProb = e.scores.vals[i*(k+1)], true
	for j := 0; j < min(r.req.TopLogProbs, k); j++ {
		o.TopLogProbs = append(o.TopLogProbs, TokenLogProb{Token: e.scores.ids[i*k+j], LogProb: e.scores.vals[i*(k+1)+1+j]})
	}
	return o
}

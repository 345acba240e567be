package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/graph"
)

// ErrShapeMismatch is returned by Reload for a model whose shapes differ from
// the served one's: its graphs could not take the new weights.
var ErrShapeMismatch = errors.New("engine: the new model's shapes differ from the served model's")

// ReloadResult is what Reload did.
type ReloadResult struct {
	// InPlace graph slots had their executable updated for the new weights;
	// Recaptured ones took a new executable where the backend refused.
	InPlace, Recaptured int
	// Duration is how long the engine loop was held (no step ran).
	Duration time.Duration
}

// Reload serves m, a model of identical shapes whose weights are in new
// buffers, in place of the current one: between two steps (a step runs on
// the old weights or the new, never a mix), every captured graph is recorded
// again and its executable updated in place (Runner.Update), or re-captured
// where the backend refuses. Requests in flight keep their KV cache and run
// their next steps on the new weights. The caller closes the old model once
// Reload returns (it is no longer read). A model of other shapes is refused
// with ErrShapeMismatch; if updating the graphs fails, the old model is
// restored, its graphs updated back, and the error returned (should that fail
// too, the engine serves eager from then on).
//
// Reloads may be called concurrently: each runs on the engine's loop, which
// owns the served model, one after the other.
func (e *Engine) Reload(ctx context.Context, m Model) (ReloadResult, error) {
	var res ReloadResult
	var rerr, shapeErr error
	err := e.do(ctx, func() {
		// The served model is the loop's: another Reload may just have
		// replaced it.
		if shapeErr = sameShapes(e.model, m); shapeErr != nil {
			return
		}
		t0 := time.Now()
		e.discardPrePlan()
		if err := e.stream.Synchronize(); err != nil {
			rerr = err
			return
		}
		// Warm-ups not captured yet (background capture) hold the old
		// weights' eager results, which a golden check would hold a new
		// capture to: they warm again.
		for _, p := range e.pools() {
			if p.runner != nil {
				p.runner.ReleaseWarmed(nil)
			}
		}
		old := e.model
		e.setModel(m)
		res, rerr = e.updateGraphs()
		if rerr != nil {
			e.setModel(old)
			if _, err := e.updateGraphs(); err != nil {
				e.forceEager = true
				e.log.Error("graphs could not be restored to the old weights after a failed reload; serving eager", "err", err)
			}
		}
		res.Duration = time.Since(t0)
	})
	if err != nil {
		return res, err
	}
	if shapeErr != nil {
		return res, shapeErr
	}
	if rerr != nil {
		return res, fmt.Errorf("engine: reload: %w", rerr)
	}
	e.log.Info("weights reloaded", "graph_slots_updated", res.InPlace, "graph_slots_recaptured", res.Recaptured,
		"seconds", fmt.Sprintf("%.3f", res.Duration.Seconds()))
	return res, nil
}

func (e *Engine) setModel(m Model) {
	e.model = m
	e.node.model = m
}

// updateGraphs updates every runner's captured graphs for the model now set.
func (e *Engine) updateGraphs() (ReloadResult, error) {
	var res ReloadResult
	for _, p := range e.pools() {
		if p.runner == nil {
			continue
		}
		u, err := p.runner.Update()
		res.InPlace += u.InPlace
		res.Recaptured += u.Recaptured
		if err != nil {
			return res, err
		}
	}
	if err := e.stream.Synchronize(); err != nil {
		return res, err
	}
	return res, nil
}

// sameShapes checks that b can replace a: the same dimensions, weights and
// graph configs.
func sameShapes(a, b Model) error {
	ai, bi := a.Info(), b.Info()
	if ai.Layers != bi.Layers || ai.KVHeads != bi.KVHeads || ai.HeadSize != bi.HeadSize || ai.Vocab != bi.Vocab ||
		ai.MaxSeq != bi.MaxSeq || ai.Params != bi.Params || ai.WeightBytes != bi.WeightBytes {
		return fmt.Errorf("%w: served %s (%d layers, %d KV heads of %d, vocabulary %d, %d positions, %d parameters in %d bytes), new %s (%d, %d of %d, %d, %d, %d in %d)",
			ErrShapeMismatch, ai.Name, ai.Layers, ai.KVHeads, ai.HeadSize, ai.Vocab, ai.MaxSeq, ai.Params, ai.WeightBytes,
			bi.Name, bi.Layers, bi.KVHeads, bi.HeadSize, bi.Vocab, bi.MaxSeq, bi.Params, bi.WeightBytes)
	}
	ac, bc := a.Configs(), b.Configs()
	if len(ac) != len(bc) {
		return fmt.Errorf("%w: %d graph configs, the new model declares %d", ErrShapeMismatch, len(ac), len(bc))
	}
	for i := range ac {
		if !sameConfig(ac[i], bc[i]) {
			return fmt.Errorf("%w: graph config %d (walk %s) differs", ErrShapeMismatch, i, ac[i].Walk)
		}
	}
	if ar, ok := a.(RegionModel); ok {
		br, ok := b.(RegionModel)
		if !ok || len(ar.Regions()) != len(br.Regions()) {
			return fmt.Errorf("%w: the new model's regions differ", ErrShapeMismatch)
		}
		for i, r := range ar.Regions() {
			s := br.Regions()[i]
			if r.Label != s.Label || !sameConfig(r.Config, s.Config) {
				return fmt.Errorf("%w: region %s differs", ErrShapeMismatch, r.Label)
			}
		}
	}
	return nil
}

func sameConfig(a, b *graph.Config) bool {
	if a.Walk != b.Walk || a.KeyInfo != b.KeyInfo || !slices.Equal(a.BatchSizes, b.BatchSizes) ||
		(a.Batched == nil) != (b.Batched == nil) || (a.Packed == nil) != (b.Packed == nil) {
		return false
	}
	if a.Batched != nil && a.Batched.TokensPerRow != b.Batched.TokensPerRow {
		return false
	}
	return a.Packed == nil || slices.Equal(a.Packed.TokenLengths, b.Packed.TokenLengths)
}

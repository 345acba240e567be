package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/graph"
)

// The scheduler: one loop goroutine owns every resource; each iteration it
// drops cancelled requests, admits waiting ones into a prefill step (the
// admission policy is admitHead, in admission.go) and decodes the running
// ones, rotating when there are more than a batch holds.
func (e *Engine) loop(ctx context.Context) {
	defer close(e.done)
	defer func() {
		err := ErrClosed
		if cause := e.Err(); cause != nil {
			err = fmt.Errorf("%w: %w", ErrClosed, cause)
		}
		e.failAll(err)
	}()
	defer func() {
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
	}()
	for {
		e.mu.Lock()
		closed := e.closed
		e.waiting = append(e.waiting, e.queue...)
		e.queue = e.queue[:0]
		e.mu.Unlock()
		if closed || ctx.Err() != nil {
			return
		}
		e.dropCancelled()
		e.publish()
		select {
		case fn := <-e.tasks:
			fn()
			continue
		default:
		}
		bgWork := e.backgroundStep(ctx)
		if len(e.waiting) == 0 && len(e.running) == 0 {
			if bgWork {
				continue
			}
			select {
			case <-e.wakeCh:
			case fn := <-e.tasks:
				fn()
			case <-ctx.Done():
				return
			}
			continue
		}
		progressed := false
		if batch := e.admit(); len(batch) > 0 {
			e.prefill(batch)
			progressed = true
		}
		if len(e.running) > 0 {
			e.decode()
			progressed = true
		}
		e.publish()
		if !progressed {
			// Requests wait for pages nobody is using: nothing can free
			// them, so the head of the queue can never run.
			select {
			case <-e.wakeCh:
			case <-ctx.Done():
				return
			}
		}
	}
}

// limits are the admission limits of the engine's options.
func (e *Engine) limits() admitLimits {
	return admitLimits{Rows: e.opts.MaxPrefillRows, Batch: e.opts.MaxBatch, Tokens: e.opts.MaxPrefillTokens}
}

// admit moves waiting requests, oldest first, into a prefill batch while the
// batch and the KV cache have room. A request the cache cannot promise its
// pages to waits (backpressure), and so does everyone behind it.
func (e *Engine) admit() []*request {
	var batch []*request
	p := prefillSoFar{Running: len(e.running)}
	for len(e.waiting) > 0 {
		r := e.waiting[0]
		if len(r.forks)+1 > e.opts.MaxBatch {
			e.waiting = e.waiting[1:]
			e.failGroup(r, fmt.Errorf("%w: %d choices, a batch holds %d", ErrInvalidRequest, len(r.forks)+1, e.opts.MaxBatch))
			continue
		}
		g := e.groupOf(r)
		if !admitHead(e.limits(), e.kv.FreePages(), p, g) {
			break
		}
		if err := e.sr.Ingest(r.id, e.requestInfo(r)); err != nil {
			if errors.Is(err, errKVFull) {
				break
			}
			e.waiting = e.waiting[1:]
			e.stats.waiting.Add(-1)
			e.finish(r, "error", err)
			continue
		}
		r.ingested = true
		r.times.admitted.Store(time.Now().UnixNano())
		e.waiting = e.waiting[1:]
		e.stats.waiting.Add(-1)
		batch = append(batch, r)
		p = p.add(g)
	}
	return batch
}

func (e *Engine) prefill(batch []*request) {
	rows := make([]graph.Row, len(batch))
	for i, r := range batch {
		rows[i] = graph.Row{ID: r.id, Tokens: r.req.Prompt}
	}
	e.discardPrePlan()
	next, err := e.runStep(WalkPrefill, rows, batch, nil)
	if err != nil {
		for _, r := range batch {
			e.failForks(r, err)
			e.finish(r, "error", err)
		}
		return
	}
	for _, r := range batch {
		e.stats.prefillTokens.Add(int64(len(r.req.Prompt)))
	}
	now := time.Now()
	if e.stats.firstToken.CompareAndSwap(0, int64(now.Sub(e.startAt))) {
		e.log.Info("first token after start", "seconds", now.Sub(e.startAt).Seconds())
	}
	// Forks open while their prompt's request still holds its pages.
	forks := e.openForks(batch)
	for i, r := range batch {
		if e.emit(r, next[i]) {
			e.running = append(e.running, r)
		}
	}
	e.running = append(e.running, forks...)
}

func (e *Engine) decode() {
	batch := e.running[:decodeRows(len(e.running), e.opts.MaxBatch)]
	rows := make([]graph.Row, len(batch))
	for i, r := range batch {
		rows[i] = graph.Row{ID: r.id, Tokens: []int32{r.lastToken()}}
	}
	next, err := e.runStep(WalkDecode, rows, batch, batch)
	if err != nil {
		for _, r := range batch {
			e.finish(r, "error", err)
		}
		e.running = slices.DeleteFunc(e.running, func(r *request) bool { return slices.Contains(batch, r) })
		return
	}
	var survivors []*request
	for i, r := range batch {
		if e.emit(r, next[i]) {
			survivors = append(survivors, r)
		}
	}
	e.running = rotate(e.running, len(batch), survivors)
}

// emit delivers a sampled token, reporting whether the request goes on.
func (e *Engine) emit(r *request, tok int32) bool {
	if r.cancelled.Load() {
		e.finish(r, "cancelled", nil)
		return false
	}
	if (e.stops[tok] && !r.req.IgnoreEOS) || slices.Contains(r.req.StopTokens, tok) {
		e.finish(r, "stop", nil)
		return false
	}
	r.generated = append(r.generated, tok)
	r.out <- e.output(r, tok)
	e.stats.tokens.Add(1)
	if len(r.generated) >= r.req.MaxTokens {
		e.finish(r, "length", nil)
		return false
	}
	return true
}

func (e *Engine) finish(r *request, reason string, err error) {
	if r.ingested {
		if rerr := e.sr.Remove(r.id); rerr != nil && err == nil {
			err = rerr
		}
		r.ingested = false
	}
	if err != nil {
		e.log.Error("request failed", "request", r.id, "err", err)
		reason = "error"
	}
	r.out <- Output{Done: true, Reason: reason, Err: err}
	close(r.out)
	e.stats.finished.Add(1)
}

func (e *Engine) dropCancelled() {
	for i, r := range e.waiting {
		// A cancelled request's forks go on: the first stands in for it.
		for r.cancelled.Load() && len(r.forks) > 0 {
			f := promoteFork(r)
			e.stats.waiting.Add(-1)
			e.finish(r, "cancelled", nil)
			e.waiting[i], r = f, f
		}
	}
	e.waiting = slices.DeleteFunc(e.waiting, func(r *request) bool {
		if r.cancelled.Load() {
			e.stats.waiting.Add(-1)
			e.finish(r, "cancelled", nil)
			return true
		}
		return false
	})
	n := len(e.running)
	e.running = slices.DeleteFunc(e.running, func(r *request) bool {
		if r.cancelled.Load() {
			e.finish(r, "cancelled", nil)
			return true
		}
		return false
	})
	if len(e.running) != n {
		e.discardPrePlan()
	}
}

// do runs fn on the loop, between steps, and waits for it: the loop owns the
// resources, so whatever touches them from outside goes through here.
func (e *Engine) do(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case e.tasks <- func() { fn(); close(done) }:
	case <-e.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-e.done:
		return ErrClosed
	}
}

// publish copies the loop's state into the counters other goroutines read.
func (e *Engine) publish() {
	e.stats.running.Store(int64(len(e.running)))
	e.stats.kvUsed.Store(int64(e.kv.UsedPages()))
	e.stats.kvFree.Store(int64(e.kv.FreePages()))
}

func (e *Engine) failAll(err error) {
	e.discardPrePlan()
	e.mu.Lock()
	e.waiting = append(e.waiting, e.queue...)
	e.queue = nil
	e.mu.Unlock()
	for _, r := range append(e.waiting, e.running...) {
		e.failForks(r, err)
		e.finish(r, "error", err)
	}
	e.waiting, e.running = nil, nil
}

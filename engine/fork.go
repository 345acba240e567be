package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/accel"
)

// Choices of one prompt share its prefill. The first choice is prefilled as
// any request; the others are forks of it, opened once its prefill step
// ran: a fork holds the prompt's positions before the last one in the
// pages of the first choice (the KV cache counts each page's holders and
// frees it at none), has the page with the last prompt position copied for
// itself (its first write lands there), and decodes the last prompt token
// at that position as its first step, which samples its first token from
// the same distribution the prefill gave the first choice (bit for bit on
// a deterministic device). No fork ever writes a shared page: the first
// choice writes from the prompt's end on, into its own last page and
// later ones, and each fork from the last prompt position on, into its
// copy and later ones.

// forkInfo names the request a fork shares its first At positions with.
type forkInfo struct {
	Parent int64
	At     int
}

// sharedPages is the pages a fork at position at shares with its parent:
// those wholly before at.
func (c *kvCache) sharedPages(at int) int { return at / c.cfg.PageSize }

// forkPromise is the pages a fork at position at, of maxLen positions, is
// promised when it opens: all it may need but those it shares (the one it
// copies included). Admission reserves exactly this for each fork of a
// group it admits, so that opening the forks after the prefill never fails
// for pages.
func (c *kvCache) forkPromise(at, maxLen int) int { return c.PagesFor(maxLen) - c.sharedPages(at) }

// ingestFork opens a fork in the cache: the pages wholly before position
// At shared, the one holding At (if At is not a page's first) copied at
// the fork's first plan, and a promise of the rest.
func (c *kvCache) ingestFork(id int64, st *kvState, info requestInfo) error {
	ps, ok := c.reqs[info.Fork.Parent]
	at := info.Fork.At
	if !ok || ps.padding || ps.next < at || at < 1 {
		return fmt.Errorf("kv: fork %d of row %d at %d: no such request row holding %d positions", id, info.Fork.Parent, at, at)
	}
	if info.MaxLen > c.cfg.MaxLen {
		return fmt.Errorf("kv: request of %d positions, the cache holds %d per request", info.MaxLen, c.cfg.MaxLen)
	}
	shared := c.sharedPages(at)
	st.promise = c.forkPromise(at, info.MaxLen)
	if st.promise > c.FreePages() {
		return fmt.Errorf("kv: %d pages for a fork of %d positions, %d free: %w", st.promise, info.MaxLen, c.FreePages(), errKVFull)
	}
	c.owed += st.promise
	st.pages = slices.Clone(ps.pages[:shared])
	for _, p := range st.pages {
		c.refs[p]++
	}
	if at%c.cfg.PageSize != 0 {
		p := c.take()
		st.pages = append(st.pages, p)
		st.allocs = 1
		c.owed--
		// The source is held until it is copied: the parent may finish
		// (and free its pages) before the fork's first plan.
		st.copying, st.copyFrom, st.copyTo = true, ps.pages[shared], p
		c.refs[st.copyFrom]++
	}
	st.next = at
	c.reqs[id] = st
	return nil
}

// copyForks copies, on s, the first own page of each fork in the step not
// copied yet, in every layer.
func (c *kvCache) copyForks(s accel.Stream, step *Step) error {
	for _, r := range step.Rows {
		st := c.reqs[r.ID]
		if st == nil || !st.copying {
			continue
		}
		ps := int64(c.cfg.PageSize)
		for _, ts := range [][]accel.Tensor{c.K, c.V} {
			for _, t := range ts {
				src := t.RowSlice(int(int64(st.copyFrom)*ps), int(int64(st.copyFrom+1)*ps))
				dst := t.RowSlice(int(int64(st.copyTo)*ps), int(int64(st.copyTo+1)*ps))
				if err := s.Copy(dst.Buf.Slice(0, dst.Bytes()), src.Buf.Slice(0, src.Bytes())); err != nil {
					return err
				}
			}
		}
		st.copying = false
		c.unref(st.copyFrom)
	}
	return nil
}

// SubmitChoices queues one request per seed, of req with that seed: the
// choices of one prompt, which is prefilled once and shared (see above).
// Each choice's outputs are those of req alone with its seed.
func (e *Engine) SubmitChoices(ctx context.Context, req Request, seeds []uint64) ([]*Handle, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no choices", ErrInvalidRequest)
	}
	// The loop may lower MaxBatch to what the graphs capture (admit
	// refuses a group that no longer fits); the pool's rows are the
	// configured bound, and never change.
	if len(seeds) > e.pen.rows {
		return nil, fmt.Errorf("%w: %d choices, a batch holds %d", ErrInvalidRequest, len(seeds), e.pen.rows)
	}
	if err := e.Validate(req); err != nil {
		return nil, err
	}
	if req.Sampling.TopP == 0 {
		req.Sampling.TopP = 1
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	// stats.waiting counts every request not yet admitted: those in the
	// queue the loop has not seen, those it holds waiting, and forks not
	// opened yet.
	if e.opts.MaxQueue > 0 && int(e.stats.waiting.Load())+len(seeds) > e.opts.MaxQueue {
		e.mu.Unlock()
		return nil, ErrQueueFull
	}
	rs := make([]*request, len(seeds))
	hs := make([]*Handle, len(seeds))
	for i, sd := range seeds {
		r := req
		r.Sampling.Seed = sd
		rs[i] = &request{id: e.nextID, req: r, out: make(chan Output, r.MaxTokens+1),
			maxLen: len(r.Prompt) + r.MaxTokens - 1, wake: e.wake}
		e.nextID++
		hs[i] = &Handle{r: rs[i]}
	}
	rs[0].forks = rs[1:]
	e.queue = append(e.queue, rs[0])
	e.stats.waiting.Add(int64(len(rs)))
	e.mu.Unlock()
	if ctx.Done() != nil {
		for _, r := range rs {
			context.AfterFunc(ctx, r.cancel)
		}
	}
	e.wake()
	return hs, nil
}

// forkAt is the position r's forks share the prompt up to: its last, which
// each fork decodes as its first step.
func (r *request) forkAt() int { return len(r.req.Prompt) - 1 }

// groupOf is what r and its forks take once admitted: r's prompt in the
// prefill, a row of the running batch each, and the pages each is
// promised (r at ingest, its forks when they open after the prefill).
func (e *Engine) groupOf(r *request) group {
	return group{
		Prompt:    len(r.req.Prompt),
		Rows:      1 + len(r.forks),
		Pages:     e.kv.PagesFor(r.maxLen),
		ForkPages: len(r.forks) * e.kv.forkPromise(r.forkAt(), r.maxLen),
	}
}

// openForks opens the forks of the prefilled batch's requests (before any
// of them may finish and free its pages) and returns those that run.
func (e *Engine) openForks(batch []*request) []*request {
	var out []*request
	for _, r := range batch {
		for _, f := range r.forks {
			e.stats.waiting.Add(-1)
			if f.cancelled.Load() {
				e.finish(f, "cancelled", nil)
				continue
			}
			info := e.requestInfo(f)
			info.Fork = &forkInfo{Parent: r.id, At: r.forkAt()}
			if err := e.sr.Ingest(f.id, info); err != nil {
				e.finish(f, "error", err)
				continue
			}
			f.ingested = true
			f.times.admitted.Store(time.Now().UnixNano())
			out = append(out, f)
		}
		r.forks = nil
	}
	return out
}

// promoteFork is what stands in the queue for a cancelled request with
// forks: its first fork, with the others as its own forks.
func promoteFork(r *request) *request {
	f := r.forks[0]
	f.forks, r.forks = r.forks[1:], nil
	return f
}

// lastToken is the token a decode step feeds for r: its last, or for a
// fork's first step the prompt's last.
func (r *request) lastToken() int32 {
	if len(r.generated) == 0 {
		return r.req.Prompt[len(r.req.Prompt)-1]
	}
	return r.generated[len(r.generated)-1]
}

// failGroup ends a waiting request and its forks with err.
func (e *Engine) failGroup(r *request, err error) {
	e.stats.waiting.Add(-1)
	e.failForks(r, err)
	e.finish(r, "error", err)
}

// failForks ends r's forks, not opened yet (so counted waiting), with err.
func (e *Engine) failForks(r *request, err error) {
	for _, f := range r.forks {
		e.stats.waiting.Add(-1)
		e.finish(f, "error", err)
	}
	r.forks = nil
}

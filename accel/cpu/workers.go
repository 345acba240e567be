package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// workers is a pool of persistent goroutines. It runs one job at a time:
// either the chunks of one eager kernel (fork/join, chunks claimed from an
// atomic counter) or one replay's static schedule (each worker runs its own
// part, with barriers between phases).
//
// Handing a microsecond kernel to a goroutine through a channel lands it on
// the waker's own scheduler slot, so the pieces run one after another; the
// workers instead watch an atomic sequence number: after a job they spin
// briefly, then yield the processor on each poll (so back-to-back kernels and
// the next decode step start at once, while the host's goroutines still get
// the processor whenever they need it) until parkTime, then park on a
// condition variable.
type workers struct {
	n   int     // goroutines besides the caller
	ctx []*kctx // each goroutine's scratch

	seq atomic.Uint64 // bumped when a job is published
	cur atomic.Pointer[job]

	busy sync.Mutex // one job at a time; a second caller runs inline

	mu      sync.Mutex
	cond    *sync.Cond
	parked  atomic.Int32
	closing atomic.Bool
	wg      sync.WaitGroup
}

// job is one published unit of work. Its fields are set before it is
// published and not changed while it is current, except the atomics.
type job struct {
	seq atomic.Uint64 // the workers' seq this publication is
	// chunked (eager)
	call   *rcall
	fn     func(c *rcall, lo, hi int, k *kctx)
	n      int
	chunks int32
	next   atomic.Int32
	// team (replay): the workers run sched's phases (schedule.runAll)
	sched *schedule
	epoch atomic.Uint64 // the number of sched's current run

	pending atomic.Int32 // chunks not yet done (chunked)
	fault   atomic.Pointer[faultErr]
}

type faultErr struct{ v any }

// parkTime is how long an idle worker polls before it parks.
const parkTime = 2 * time.Millisecond

func newWorkers(d *Device, threads int) *workers {
	w := &workers{n: threads - 1}
	w.cond = sync.NewCond(&w.mu)
	w.ctx = make([]*kctx, w.n+1)
	for i := range w.ctx {
		w.ctx[i] = &kctx{d: d}
	}
	for i := 1; i <= w.n; i++ {
		w.wg.Add(1)
		go w.loop(i)
	}
	return w
}

// wait returns once seq differs from seen (or the pool closes): spinning a
// few polls, then yielding the processor on every poll (so that a worker
// waiting for the next kernel or step never keeps the host's goroutines,
// the engine's planning or a server's handlers, from a processor), then,
// after parkTime, parked.
func (w *workers) wait(seen uint64) {
	var start time.Time
	for spins := 0; ; spins++ {
		if w.seq.Load() != seen || w.closing.Load() {
			return
		}
		if spins < 64 {
			continue
		}
		runtime.Gosched()
		if spins&63 != 0 {
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start = now
			continue
		}
		if now.Sub(start) < parkTime {
			continue
		}
		w.mu.Lock()
		w.parked.Add(1)
		for w.seq.Load() == seen && !w.closing.Load() {
			w.cond.Wait()
		}
		w.parked.Add(-1)
		w.mu.Unlock()
		return
	}
}

func (w *workers) loop(idx int) {
	defer w.wg.Done()
	k := w.ctx[idx]
	// Not the current seq: a team job published before this goroutine first
	// ran still needs it.
	seen := uint64(0)
	for {
		w.wait(seen)
		if w.closing.Load() {
			return
		}
		seen = w.seq.Load()
		j := w.cur.Load()
		if j == nil || j.seq.Load() != seen {
			continue // a newer job is being published
		}
		if j.sched != nil {
			j.sched.runAll(j, idx, k)
			continue
		}
		j.work(k)
	}
}

// work claims and runs chunks until none are left.
func (j *job) work(k *kctx) {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		j.runChunk(int(c), k)
		j.pending.Add(-1)
	}
}

func (j *job) runChunk(c int, k *kctx) {
	defer func() {
		if r := recover(); r != nil {
			j.fault.CompareAndSwap(nil, &faultErr{r})
		}
	}()
	lo, hi := j.n*c/int(j.chunks), j.n*(c+1)/int(j.chunks)
	j.fn(j.call, lo, hi, k)
}

// publish makes j the current job and wakes parked workers.
func (w *workers) publish(j *job) {
	s := w.seq.Load() + 1
	j.seq.Store(s)
	w.cur.Store(j)
	w.seq.Store(s)
	if w.parked.Load() > 0 {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// waitPending spins (then yields) until j's pending count is zero.
func waitPending(j *job) {
	for spins := 0; j.pending.Load() > 0; spins++ {
		if spins > 256 {
			runtime.Gosched()
		}
	}
}

// run calls fn on n units of c split into chunks, in parallel when the pool
// is free (k is the caller's scratch). Chunks are independent; which
// goroutine runs which chunk never changes a result. A panic in a chunk is
// re-raised on the caller.
func (w *workers) run(c *rcall, fn func(c *rcall, lo, hi int, k *kctx), n, chunks int, k *kctx) {
	if chunks <= 1 || w.n == 0 || !w.busy.TryLock() {
		fn(c, 0, n, k)
		return
	}
	j := &job{call: c, fn: fn, n: n, chunks: int32(chunks)}
	j.pending.Store(int32(chunks))
	w.publish(j)
	j.work(k)
	waitPending(j)
	w.busy.Unlock()
	if f := j.fault.Load(); f != nil {
		panic(f.v)
	}
}

func (w *workers) close() {
	w.closing.Store(true)
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
	w.wg.Wait()
}

// String is for debugging.
func (w *workers) String() string { return fmt.Sprintf("workers(%d)", w.n+1) }

package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// workers is a pool of persistent goroutines that run the chunks of one job at
// a time. Handing a microsecond kernel to a goroutine through a channel lands it
// on the waker's own scheduler slot, so the pieces run one after another; the
// workers instead spin on an atomic generation counter for a while after each
// job (so back-to-back kernels start at once), then yield, then park.
type workers struct {
	n int // goroutines besides the caller

	gen atomic.Uint64
	cur atomic.Pointer[job]

	busy sync.Mutex // one job at a time; a second caller runs inline

	mu      sync.Mutex
	cond    *sync.Cond
	parked  atomic.Int32
	closing atomic.Bool
	wg      sync.WaitGroup
}

type job struct {
	fn      func(chunk int)
	chunks  int32
	next    atomic.Int32
	pending atomic.Int32
}

// spinFor is how many idle polls a worker makes before it parks; each poll
// past the first few yields the processor.
const spinFor = 20000

func newWorkers(threads int) *workers {
	w := &workers{n: threads - 1}
	w.cond = sync.NewCond(&w.mu)
	for i := 0; i < w.n; i++ {
		w.wg.Add(1)
		go w.loop()
	}
	return w
}

func (w *workers) loop() {
	defer w.wg.Done()
	seen := w.gen.Load()
	for {
		spins := 0
		for w.gen.Load() == seen && !w.closing.Load() {
			spins++
			if spins > spinFor {
				w.mu.Lock()
				w.parked.Add(1)
				for w.gen.Load() == seen && !w.closing.Load() {
					w.cond.Wait()
				}
				w.parked.Add(-1)
				w.mu.Unlock()
				break
			}
			if spins > 64 {
				runtime.Gosched()
			}
		}
		if w.closing.Load() {
			return
		}
		seen = w.gen.Load()
		if j := w.cur.Load(); j != nil {
			j.work()
		}
	}
}

func (j *job) work() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		j.fn(int(c))
		j.pending.Add(-1)
	}
}

// run calls fn(0..chunks-1), in parallel when the pool is free. Chunks must be
// independent; which goroutine runs which chunk never changes a result.
func (w *workers) run(chunks int, fn func(chunk int)) {
	if chunks <= 1 || w.n == 0 || !w.busy.TryLock() {
		for c := 0; c < chunks; c++ {
			fn(c)
		}
		return
	}
	j := &job{fn: fn, chunks: int32(chunks)}
	j.pending.Store(int32(chunks))
	w.cur.Store(j)
	w.gen.Add(1)
	if w.parked.Load() > 0 {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	}
	j.work()
	for spins := 0; j.pending.Load() > 0; spins++ {
		if spins > 64 {
			runtime.Gosched()
		}
	}
	w.cur.Store(nil)
	w.busy.Unlock()
}

func (w *workers) close() {
	w.closing.Store(true)
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
	w.wg.Wait()
}

package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Group is a set of ranks that meet at collectives.
type Group interface {
	Rank() int
	Size() int
	// AllGather contributes v and returns every rank's contribution, by rank.
	AllGather(ctx context.Context, v []int64) ([][]int64, error)
	// Barrier returns once every rank has called it.
	Barrier(ctx context.Context) error
}

// ErrClosed: the group was closed while a rank waited.
var ErrClosed = errors.New("comm: group closed")

type single struct{}

// Single is the group of one rank.
func Single() Group { return single{} }

func (single) Rank() int { return 0 }
func (single) Size() int { return 1 }
func (single) AllGather(ctx context.Context, v []int64) ([][]int64, error) {
	return [][]int64{append([]int64(nil), v...)}, ctx.Err()
}
func (single) Barrier(ctx context.Context) error { return ctx.Err() }

// Local is an in-process group: NewLocal(n) returns one handle per rank, each
// used by its own goroutine.
type Local struct {
	w    *world
	rank int
	// Barriers counts the barriers and all-gathers this rank has met.
	mu    sync.Mutex
	count int
}

type world struct {
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	round   int // completed collectives
	vals    [][]int64
	arrived int // ranks in the current round
	leaving int // ranks yet to collect the last round's result
	result  [][]int64
	closed  bool
}

// NewLocal makes an in-process group of n ranks.
func NewLocal(n int) []*Local {
	w := &world{n: n, vals: make([][]int64, n)}
	w.cond = sync.NewCond(&w.mu)
	ls := make([]*Local, n)
	for i := range ls {
		ls[i] = &Local{w: w, rank: i}
	}
	return ls
}

// Rank is this handle's rank.
func (l *Local) Rank() int { return l.rank }

// Size is the number of ranks.
func (l *Local) Size() int { return l.w.n }

// Collectives is the number of collectives (barriers and all-gathers) this
// rank has completed; ranks that stay in step report equal counts.
func (l *Local) Collectives() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// Close wakes every waiting rank with ErrClosed.
func (l *Local) Close() {
	l.w.mu.Lock()
	l.w.closed = true
	l.w.cond.Broadcast()
	l.w.mu.Unlock()
}

// AllGather implements Group.
func (l *Local) AllGather(ctx context.Context, v []int64) ([][]int64, error) {
	w := l.w
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	// A new round starts only once every rank has collected the last one.
	for w.leaving > 0 && !w.closed {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w.cond.Wait()
	}
	if w.closed {
		return nil, ErrClosed
	}
	round := w.round
	w.vals[l.rank] = append([]int64(nil), v...)
	w.arrived++
	if w.arrived == w.n {
		w.result, w.vals = w.vals, make([][]int64, w.n)
		w.arrived, w.leaving = 0, w.n
		w.round++
		w.cond.Broadcast()
	}
	for w.round == round && !w.closed {
		if err := ctx.Err(); err != nil {
			w.vals[l.rank] = nil
			w.arrived--
			return nil, fmt.Errorf("comm: rank %d waiting for %d peers: %w", l.rank, w.n-w.arrived-1, err)
		}
		w.cond.Wait()
	}
	if w.round == round {
		return nil, ErrClosed
	}
	res := w.result
	w.leaving--
	if w.leaving == 0 {
		w.cond.Broadcast()
	}
	l.mu.Lock()
	l.count++
	l.mu.Unlock()
	out := make([][]int64, len(res))
	for i := range res {
		out[i] = append([]int64(nil), res[i]...)
	}
	return out, nil
}

// Barrier implements Group.
func (l *Local) Barrier(ctx context.Context) error {
	_, err := l.AllGather(ctx, nil)
	return err
}

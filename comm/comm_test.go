package comm

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestLocalAllGather(t *testing.T) {
	const n, rounds = 4, 200
	g := NewLocal(n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(l *Local) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				got, err := l.AllGather(context.Background(), []int64{int64(l.Rank()), int64(i)})
				if err != nil {
					errs <- err
					return
				}
				for rank, v := range got {
					if v[0] != int64(rank) || v[1] != int64(i) {
						errs <- errors.New("a rank saw another round's values")
						return
					}
				}
				if i%3 == 0 {
					if err := l.Barrier(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			}
		}(g[r])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, l := range g {
		if l.Collectives() != g[0].Collectives() {
			t.Fatalf("collective counts differ: %d vs %d", l.Collectives(), g[0].Collectives())
		}
	}
}

func TestLocalCancel(t *testing.T) {
	g := NewLocal(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g[0].Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a barrier no peer met: %v", err)
	}
	// The group still works afterwards.
	done := make(chan error)
	go func() { done <- g[1].Barrier(context.Background()) }()
	if err := g[0].Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSingle(t *testing.T) {
	s := Single()
	got, err := s.AllGather(context.Background(), []int64{7})
	if err != nil || len(got) != 1 || got[0][0] != 7 || s.Size() != 1 || s.Rank() != 0 {
		t.Fatalf("single: %v %v", got, err)
	}
}

func TestAgree(t *testing.T) {
	g := NewLocal(3)
	vals := [][]int64{{1, 1, 5}, {1, 0, 7}, {1, 1, 2}}
	type res struct {
		min, max []int64
		err      error
	}
	out := make([]res, 3)
	var wg sync.WaitGroup
	for r := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r].min, out[r].err = Agree(context.Background(), g[r], vals[r], Min)
			if out[r].err == nil {
				out[r].max, out[r].err = Agree(context.Background(), g[r], vals[r], Max)
			}
		}()
	}
	wg.Wait()
	for r, o := range out {
		if o.err != nil {
			t.Fatalf("rank %d: %v", r, o.err)
		}
		if want := []int64{1, 0, 2}; !slices.Equal(o.min, want) {
			t.Errorf("rank %d: Min gave %v, want %v", r, o.min, want)
		}
		if want := []int64{1, 1, 7}; !slices.Equal(o.max, want) {
			t.Errorf("rank %d: Max gave %v, want %v", r, o.max, want)
		}
	}
}

// Ranks agreeing on vectors of different lengths is an error on every rank,
// never a silent reduction over the shorter one.
func TestAgreeLengthsDiffer(t *testing.T) {
	g := NewLocal(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = Agree(context.Background(), g[r], make([]int64, 1+r), Min)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d agreed with a peer whose vector was of another length", r)
		}
	}
}

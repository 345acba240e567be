package alloc

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

func TestBudget(t *testing.T) {
	if _, err := NewBudget("dev", SegmentSize-1); err == nil || !strings.Contains(err.Error(), "dev: memory capacity") {
		t.Fatalf("a capacity below one segment: %v", err)
	}
	const capacity = 4 * SegmentSize
	b, err := NewBudget("dev", capacity)
	if err != nil {
		t.Fatal(err)
	}
	if b.Capacity() != capacity {
		t.Fatalf("capacity %d, want %d", b.Capacity(), capacity)
	}
	if mi := b.MemInfo(); mi != (accel.MemInfo{Free: capacity, Total: capacity}) {
		t.Fatalf("fresh budget: %+v", mi)
	}
	if err := b.Charge(capacity - 100); err != nil {
		t.Fatal(err)
	}
	err = b.Charge(101)
	if !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("charging past the capacity: %v, want ErrOutOfMemory", err)
	}
	if want := fmt.Sprintf("dev: 101 bytes asked, 100 of %d free", capacity); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if mi := b.MemInfo(); mi.Free != 100 {
		t.Fatalf("a refused charge took memory: %+v", mi)
	}
	if err := b.Charge(100); err != nil {
		t.Fatalf("charging exactly what is free: %v", err)
	}
	b.Uncharge(capacity)
	if mi := b.MemInfo(); mi.Free != capacity {
		t.Fatalf("after giving everything back: %+v", mi)
	}
}

// Concurrent charges never take more than the capacity together.
func TestBudgetConcurrent(t *testing.T) {
	const capacity = SegmentSize
	b, err := NewBudget("dev", capacity)
	if err != nil {
		t.Fatal(err)
	}
	const workers, tries, n = 8, 1000, 4096
	var wg sync.WaitGroup
	var mu sync.Mutex
	held := int64(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := int64(0)
			for i := 0; i < tries; i++ {
				if b.Charge(n) == nil {
					mine += n
				}
				if i%3 == 2 && mine > 0 {
					b.Uncharge(n)
					mine -= n
				}
			}
			mu.Lock()
			held += mine
			mu.Unlock()
		}()
	}
	wg.Wait()
	if mi := b.MemInfo(); mi.Total-mi.Free != held || held > capacity {
		t.Fatalf("workers hold %d bytes, the budget counts %d of %d", held, mi.Total-mi.Free, capacity)
	}
}

// budgetSource is a Source whose segments are charged to a Budget, as every
// backend's are.
type budgetSource struct{ b *Budget }

func (s budgetSource) AllocSegment(n int64) (accel.Memory, error) {
	if err := s.b.Charge(n); err != nil {
		return nil, err
	}
	return &fakeMem{n}, nil
}

func (s budgetSource) FreeSegment(m accel.Memory) { s.b.Uncharge(m.Size()) }
func (s budgetSource) MemInfo() accel.MemInfo     { return s.b.MemInfo() }

func TestDeviceMemory(t *testing.T) {
	b, err := NewBudget("dev", 8*SegmentSize)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	m := NewDeviceMemory(b, budgetSource{b}, func() error {
		if closed {
			return fmt.Errorf("dev: device: %w", accel.ErrClosed)
		}
		return nil
	})
	if m.Caching() == nil || m.Allocator() != accel.Allocator(m.Caching()) {
		t.Fatal("Allocator is not the caching allocator")
	}
	buf, err := m.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	if mi := m.MemInfo(); mi.Free != 7*SegmentSize || mi.Total != 8*SegmentSize {
		t.Fatalf("one small allocation: %+v, want one segment charged", mi)
	}
	if _, err := m.Alloc(8 * SegmentSize); !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("allocating past the budget: %v, want ErrOutOfMemory", err)
	}
	pool, err := m.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	pool.Release()
	if err := m.Free(buf); err != nil {
		t.Fatal(err)
	}
	m.Allocator().EmptyCache()
	if mi := m.MemInfo(); mi.Free != mi.Total {
		t.Fatalf("after freeing everything: %+v", mi)
	}
	closed = true
	if _, err := m.Alloc(16); !errors.Is(err, accel.ErrClosed) {
		t.Errorf("Alloc on a closed device: %v, want ErrClosed", err)
	}
	if _, err := m.NewPool(); !errors.Is(err, accel.ErrClosed) {
		t.Errorf("NewPool on a closed device: %v, want ErrClosed", err)
	}
	if err := m.Caching().Check(); err != nil {
		t.Fatal(err)
	}
}

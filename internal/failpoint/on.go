//go:build reprise_failpoints

package failpoint

import (
	"sync"
	"sync/atomic"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

var (
	mu    sync.Mutex
	hooks = map[string]func() error{}
	phase []string // the phases entered and not left, innermost last
)

// Inject runs the hook enabled for name and returns its error (nil
// without a hook).
func Inject(name string) error {
	mu.Lock()
	h := hooks[name]
	mu.Unlock()
	if h == nil {
		return nil
	}
	return h()
}

// Enter marks the start of a phase; the returned function marks its end.
func Enter(p string) func() {
	mu.Lock()
	phase = append(phase, p)
	n := len(phase)
	mu.Unlock()
	return func() {
		mu.Lock()
		if len(phase) >= n {
			phase = phase[:n-1]
		}
		mu.Unlock()
	}
}

// Current is the innermost phase entered and not left ("" for none).
func Current() string {
	mu.Lock()
	defer mu.Unlock()
	if len(phase) == 0 {
		return ""
	}
	return phase[len(phase)-1]
}

// In reports whether phase p is entered (at any depth).
func In(p string) bool {
	mu.Lock()
	defer mu.Unlock()
	for _, q := range phase {
		if q == p {
			return true
		}
	}
	return false
}

// Enable sets the hook of a point (nil removes it).
func Enable(name string, hook func() error) {
	mu.Lock()
	defer mu.Unlock()
	if hook == nil {
		delete(hooks, name)
		return
	}
	hooks[name] = hook
}

// Reset removes every hook.
func Reset() {
	mu.Lock()
	defer mu.Unlock()
	hooks = map[string]func() error{}
}

// FailNth is a hook that returns err at the n-th call (counting from 1)
// made while phase is entered ("" counts every call), once, and reports
// through fired whether it has.
func FailNth(n int, p string, err error) (hook func() error, fired func() bool) {
	var calls atomic.Int64
	var done atomic.Bool
	hook = func() error {
		if p != "" && !In(p) {
			return nil
		}
		if calls.Add(1) == int64(n) {
			done.Store(true)
			return err
		}
		return nil
	}
	return hook, done.Load
}

package accel

import (
	"fmt"
	"runtime/debug"
)

// Capture records fn's work on s into a graph whose allocations come from
// pool. However fn ends, s leaves capture mode and pool accepts the next
// capture: on an error or a panic inside fn, blocks the capture allocated
// go back to the pool and the error (wrapping ErrCaptureFailed, with the
// panic's value and stack) is returned; on an invalidated capture the cause is
// returned. Callers never see a stream stuck capturing, which would sink
// every later capture on it.
func Capture(s Stream, pool Pool, fn func() error) (g Graph, err error) {
	if err := s.BeginCapture(pool); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			s.AbortCapture()
			g, err = nil, fmt.Errorf("accel: panic during capture: %v: %w\n%s", r, ErrCaptureFailed, debug.Stack())
		}
	}()
	if ferr := fn(); ferr != nil {
		s.AbortCapture()
		return nil, fmt.Errorf("accel: %w: %w", ErrCaptureFailed, ferr)
	}
	return s.EndCapture()
}

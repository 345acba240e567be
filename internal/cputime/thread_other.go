//go:build !linux

package cputime

import "time"

// Thread is 0: a thread's CPU time is measured on Linux only.
func Thread() time.Duration { return 0 }

//go:build unix

package engine

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used (user and system): on
// a machine shared with other work a step's wall time measures the share
// of the cores it got, its CPU time the work it needed.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build !unix

package cpu

import "time"

// processCPU: not measured here (cputime_unix_test.go).
func processCPU() time.Duration { return 0 }

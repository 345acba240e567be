//go:build !unix

package engine

import "time"

// processCPU is 0 where getrusage is not available: DecodeBench.CPU then
// reports nothing.
func processCPU() time.Duration { return 0 }

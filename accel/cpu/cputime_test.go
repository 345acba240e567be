package cpu

import (
	"time"

	"github.com/reprise-ml/reprise/internal/cputime"
)

// processCPU is the CPU time this process has used (user and system; 0
// where not measured): on a machine shared with other work a benchmark's
// wall time measures the share of the cores it got, its CPU time what it
// needed.
func processCPU() time.Duration { return cputime.Process() }

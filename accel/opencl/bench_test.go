package opencl_test

import (
	"testing"

	"github.com/reprise-ml/reprise/accel/acceltest"
)

// The launch path: a chain of 200 small kernels, eager against one replay of
// the same chain recorded in a command buffer, per kernel (see
// acceltest.BenchLaunchEager); and what Instantiate (and an Update, which
// re-records) costs for the 200-node chain.

func BenchmarkLaunchEager(b *testing.B)  { acceltest.BenchLaunchEager(b, "opencl") }
func BenchmarkLaunchReplay(b *testing.B) { acceltest.BenchLaunchReplay(b, "opencl") }
func BenchmarkInstantiate(b *testing.B)  { acceltest.BenchInstantiate(b, "opencl") }

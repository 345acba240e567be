package cpu_test

import (
	"testing"

	"github.com/reprise-ml/reprise/accel/acceltest"
)

// The launch path: a chain of 200 small kernels, eager against one replay of
// the same chain captured as a graph, per kernel (see acceltest.BenchLaunchEager).

func BenchmarkLaunchEager(b *testing.B)  { acceltest.BenchLaunchEager(b, "cpu") }
func BenchmarkLaunchReplay(b *testing.B) { acceltest.BenchLaunchReplay(b, "cpu") }

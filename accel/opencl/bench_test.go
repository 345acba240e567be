package opencl_test

import (
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// The launch path: a chain of 200 small kernels (adds over 64 floats), eager
// (one launch each, then a synchronisation) against one replay of the same
// chain recorded in a command buffer. Reported per kernel, so the two figures
// compare the cost of an eager launch with the cost of a graph node.
const chainLen = 200

func smallChain(l *accel.Launcher, x, y accel.Tensor) {
	for i := 0; i < chainLen; i++ {
		l.Add(y, y, x)
	}
}

func benchEnv(b *testing.B) *acceltest.Env {
	if err := accel.Probe("opencl"); err != nil {
		b.Skipf("OpenCL not usable here: %v", err)
	}
	return acceltest.Open(b, "opencl", accel.Options{})
}

func BenchmarkLaunchEager(b *testing.B) {
	e := benchEnv(b)
	x, y := e.Zeros(accel.F32, 1, 64), e.Zeros(accel.F32, 1, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l := accel.On(e.S)
		smallChain(l, x, y)
		if err := e.S.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chainLen), "ns/kernel")
}

func BenchmarkLaunchReplay(b *testing.B) {
	e := benchEnv(b)
	x, y := e.Zeros(accel.F32, 1, 64), e.Zeros(accel.F32, 1, 64)
	pool, _ := e.Dev.NewPool()
	g, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		smallChain(l, x, y)
		return l.Err()
	})
	if err != nil {
		b.Fatal(err)
	}
	ex, err := g.Instantiate()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ex.Launch(e.S); err != nil {
			b.Fatal(err)
		}
		if err := e.S.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chainLen), "ns/kernel")
}

// Recording: what Instantiate (and an Update, which re-records) costs for the
// 200-node chain.
func BenchmarkInstantiate(b *testing.B) {
	e := benchEnv(b)
	x, y := e.Zeros(accel.F32, 1, 64), e.Zeros(accel.F32, 1, 64)
	pool, _ := e.Dev.NewPool()
	g, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		smallChain(l, x, y)
		return l.Err()
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ex, err := g.Instantiate()
		if err != nil {
			b.Fatal(err)
		}
		ex.Destroy()
	}
}

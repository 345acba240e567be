package acceltest

import (
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// The launch path, for every backend's benchmarks: a chain of 200 small
// kernels (adds over 64 floats), eager (one launch each, then a
// synchronisation) against one replay of the same chain captured as a graph.
// Reported per kernel, so the two figures compare the cost of an eager launch
// with the cost of a graph node.
const chainLen = 200

func smallChain(l *accel.Launcher, x, y accel.Tensor) {
	for i := 0; i < chainLen; i++ {
		l.Add(y, y, x)
	}
}

// benchEnv opens the backend's device 0, skipping where it is not usable
// here, with the chain's operands.
func benchEnv(b *testing.B, backend string) (e *Env, x, y accel.Tensor) {
	b.Helper()
	if err := accel.Probe(backend); err != nil {
		b.Skipf("backend %s not usable here: %v", backend, err)
	}
	e = Open(b, backend, accel.Options{})
	return e, e.Zeros(accel.F32, 1, 64), e.Zeros(accel.F32, 1, 64)
}

// benchGraph captures the chain.
func benchGraph(b *testing.B, e *Env, x, y accel.Tensor) accel.Graph {
	b.Helper()
	pool, err := e.Dev.NewPool()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Release)
	g, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		smallChain(l, x, y)
		return l.Err()
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Destroy)
	return g
}

// BenchLaunchEager times the chain launched eagerly on the backend.
func BenchLaunchEager(b *testing.B, backend string) {
	e, x, y := benchEnv(b, backend)
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

// BenchLaunchReplay times one replay of the captured chain on the backend.
func BenchLaunchReplay(b *testing.B, backend string) {
	e, x, y := benchEnv(b, backend)
	ex, err := benchGraph(b, e, x, y).Instantiate()
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Destroy()
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

// BenchInstantiate times what Instantiate costs for the 200-node chain.
func BenchInstantiate(b *testing.B, backend string) {
	e, x, y := benchEnv(b, backend)
	g := benchGraph(b, e, x, y)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ex, err := g.Instantiate()
		if err != nil {
			b.Fatal(err)
		}
		ex.Destroy()
	}
}

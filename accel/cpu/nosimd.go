//go:build !(goexperiment.simd && amd64)

package cpu

// This build has no vector kernels (it needs GOEXPERIMENT=simd on amd64).
var vecBuilt *vecOps

// vecRunnable: none.
var vecRunnable []*vecOps

//go:build !(goexperiment.simd && amd64)

package cpu

// This build has no vector kernels (it needs GOEXPERIMENT=simd on amd64).

// fusedMatMul: the float32 and bf16 matmuls round each product before
// adding it (see fma32.go for why this build does not fuse).
const fusedMatMul = false

var vecBuilt *vecOps

// vecRunnable: none.
var vecRunnable []*vecOps

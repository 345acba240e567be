// Package acceltest is the conformance suite every accel backend passes: kernels
// against float64 references, capture and replay against eager (a chain, and
// a whole decoder step), recovery from failed captures, out of memory, events
// across streams, in-place update, nested and multi-stream replay, captured
// uploads, bf16 weights, refused operands, agreement with the CPU device and
// staging. It imports nothing above accel; the embedded model's greedy
// reference output, eager and replayed, is accel/acceltest/modeltest.
// Each backend's TestConformance calls both Runs with its registry name; a
// backend that is not present here skips, saying why.
//
// Where a device's Capability says it is Deterministic, results must equal
// their reference bit for bit; elsewhere within float tolerance. A replay
// equals eager execution bit for bit on every device.
//
// The suite compares devices with the CPU device, which it opens by name: a
// backend's test binary registers it by blank-importing accel/cpu.
package acceltest

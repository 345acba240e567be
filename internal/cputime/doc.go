// Package cputime reports the CPU time this process has used, for
// benchmarks on machines shared with other work: there a step's wall time
// measures the share of the cores it got, its CPU time the work it needed.
//
// Invariant: Process is monotonic within a process, and 0 on every call
// where the platform does not report CPU time (callers treat 0 as "not
// measured").
package cputime

// Package cputime reports the CPU time this process has used, for
// benchmarks on machines shared with other work: there a step's wall time
// measures the share of the cores it got, its CPU time the work it needed.
//
// Thread is the calling OS thread's CPU time (Linux), for timing one
// worker's part of a step apart from the time the system gave its core to
// other work.
//
// Invariant: Process is monotonic within a process, Thread within a
// thread, and each is 0 on every call where the platform does not report
// it (callers treat 0 as "not measured").
package cputime

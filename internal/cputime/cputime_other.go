//go:build !unix

package cputime

import "time"

// Process is 0: this platform's CPU time is not measured here.
func Process() time.Duration { return 0 }

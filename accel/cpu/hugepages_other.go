//go:build !linux

package cpu

import (
	"errors"
	"runtime"
)

// Only Linux has madvise(MADV_HUGEPAGE): elsewhere packed weights stay on
// the Go heap.

func thpMode() (bool, string) { return false, "not on Linux (" + runtime.GOOS + ")" }

func mapHuge(n uintptr) (raw, b []byte, err error) {
	return nil, nil, errors.New("huge-page mappings are Linux only")
}

func addUnmapCleanup(c *hugeChunk, raw []byte, st *hugeStats) {}

package cpu

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// madvHugePage is MADV_HUGEPAGE, 14 on every Linux architecture Go runs on.
const madvHugePage = 14

// thpMode reads whether the kernel gives madvised memory huge pages.
func thpMode() (bool, string) {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return false, fmt.Sprintf("no transparent huge pages (%v)", err)
	}
	switch m := thpSetting(string(b)); m {
	case "always", "madvise":
		return true, "transparent_hugepage/enabled is " + m
	default:
		return false, fmt.Sprintf("transparent_hugepage/enabled is %q", m)
	}
}

// mapHuge maps n bytes (a multiple of hugePage) at a hugePage boundary,
// advised to be backed by huge pages: raw is the whole mapping (what
// munmap takes back), b its aligned n bytes.
func mapHuge(n uintptr) (raw, b []byte, err error) {
	raw, err = syscall.Mmap(-1, 0, int(n+hugePage), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", n+hugePage, err)
	}
	off := (hugePage - uintptr(unsafe.Pointer(&raw[0]))%hugePage) % hugePage
	b = raw[off : off+n : off+n]
	// Before the first touch: the page faults then allocate huge pages.
	if err := syscall.Madvise(b, madvHugePage); err != nil {
		_ = syscall.Munmap(raw)
		return nil, nil, fmt.Errorf("madvise(MADV_HUGEPAGE): %w", err)
	}
	return raw, b, nil
}

// addUnmapCleanup unmaps raw once c is unreachable (see the invariants in
// hugepages.go).
func addUnmapCleanup(c *hugeChunk, raw []byte, st *hugeStats) {
	runtime.AddCleanup(c, func(raw []byte) {
		if err := syscall.Munmap(raw); err != nil {
			slog.Warn("cpu: unmapping a huge-page chunk of packed weights", "bytes", len(raw), "err", err)
			return
		}
		st.chunks.Add(-1)
		st.bytes.Add(-int64(len(raw)))
	}, raw)
}

//go:build linux

package mapped

import (
	"os"
	"syscall"
	"unsafe"
)

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14): fault the range's
// pages in for reading, in the kernel, without touching them one by one.
const madvPopulateRead = 22

// populate reads the pages under b, a slice of the mapping all, in:
// MADV_WILLNEED starts the disk's readahead for pages not yet cached, then
// MADV_POPULATE_READ maps them (or, on older kernels, a read of each page
// does).
func populate(all, b []byte) {
	r := pageRange(all, b)
	_ = syscall.Madvise(r, syscall.MADV_WILLNEED)
	if syscall.Madvise(r, madvPopulateRead) != nil {
		touch(r)
	}
}

// drop lets the whole pages inside b, a slice of the mapping all, leave
// resident memory (MADV_DONTNEED: a shared file mapping's pages stay in the
// page cache and fault back in if read).
func drop(all, b []byte) {
	if !within(all, b) {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(all)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	page := uintptr(os.Getpagesize())
	lo := (p - base + page - 1) / page * page
	hi := (p - base + uintptr(len(b))) / page * page
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(all[lo:hi], syscall.MADV_DONTNEED)
}

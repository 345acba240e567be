//go:build unix

package mapped

import (
	"os"
	"syscall"
	"unsafe"
)

func mmap(f *os.File, size int) ([]byte, func([]byte) error, error) {
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, syscall.Munmap, nil
}

func drop(all, b []byte) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(all)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(all)) {
		return
	}
	page := uintptr(os.Getpagesize())
	lo := (p - base + page - 1) / page * page
	hi := (p - base + uintptr(len(b))) / page * page
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(all[lo:hi], syscall.MADV_DONTNEED)
}

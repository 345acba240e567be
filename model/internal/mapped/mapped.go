package mapped

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/reprise-ml/reprise/internal/bounded"
)

// File is an open, mapped file.
type File struct {
	// Path is the name the file was opened by.
	Path string
	// Data is the file's bytes; read only.
	Data  []byte
	unmap func([]byte) error

	mu     sync.Mutex
	closed bool // Close was called
	refs   int  // Retain's releases still to come
	all    []byte
}

// Open maps the regular file at path (see bounded.Open for what else it
// refuses).
func Open(path string) (*File, error) {
	// A device or a named pipe is refused before it is opened (opening a
	// pipe with no writer blocks).
	f, st, err := bounded.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := st.Size()
	if size == 0 {
		return &File{Path: path, Data: []byte{}}, nil
	}
	if int64(int(size)) != size || size < 0 {
		return nil, fmt.Errorf("%s: %d bytes do not fit in this platform's address space", path, size)
	}
	if data, unmap, err := mmap(f, int(size)); err == nil {
		return &File{Path: path, Data: data, unmap: unmap, all: data}, nil
	}
	// No mapping (another platform, or a file system that refuses it): read
	// exactly the size stat reported, never more.
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{Path: path, Data: data, all: data}, nil
}

// Mapped reports whether Data is a memory mapping (rather than a copy).
func (f *File) Mapped() bool { return f.unmap != nil }

// Close unmaps the file, or, while slices of it are retained, leaves that
// to the last release. Data must not be used afterwards.
func (f *File) Close() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.Data = nil
	return f.unmapLocked()
}

func (f *File) unmapLocked() error {
	if f.refs > 0 || f.all == nil {
		return nil
	}
	d := f.all
	f.all = nil
	if f.unmap != nil {
		return f.unmap(d)
	}
	return nil
}

// Retain keeps b, a slice of Data, valid past Close until release is
// called (once; later calls do nothing), and reads its pages in now (from
// the page cache, or the disk ahead of use), so that a device reading it in
// place (accel.HostAliaser) neither faults on its first step nor finds the
// mapping gone. The pages must stay resident and unchanged while retained:
// Drop is not to be called on them. ok is false once f is closed, or when b
// is not a slice of Data.
func (f *File) Retain(b []byte) (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || !within(f.all, b) {
		return nil, false
	}
	f.refs++
	if f.unmap != nil {
		populate(f.all, b)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.refs--
			if f.closed {
				_ = f.unmapLocked()
			}
		})
	}, true
}

// within reports whether b lies inside all.
func within(all, b []byte) bool {
	if len(b) == 0 || len(all) == 0 {
		return false
	}
	base, p := uintptr(unsafe.Pointer(unsafe.SliceData(all))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= base && p+uintptr(len(b)) <= base+uintptr(len(all))
}

// Drop tells the kernel that the pages under b, a slice of f.Data, may
// leave this process's resident memory: a loader calls it once a tensor is
// on the device, so the mapping does not hold a second copy of the model.
// The pages stay in the page cache and fault back in if read again. Only
// whole pages inside b are dropped; a copy (not a mapping) is left alone.
func (f *File) Drop(b []byte) {
	if f.unmap == nil || len(b) == 0 {
		return
	}
	drop(f.Data, b)
}

// pageRange is b widened to whole pages, within all (b is a slice of all).
func pageRange(all, b []byte) []byte {
	page := uintptr(os.Getpagesize())
	base, p := uintptr(unsafe.Pointer(unsafe.SliceData(all))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p - base) / page * page
	hi := min(uintptr(len(all)), (p-base+uintptr(len(b))+page-1)/page*page)
	return all[lo:hi]
}

// touch reads one byte of each page of b, faulting them in.
func touch(b []byte) {
	page := os.Getpagesize()
	var s byte
	for i := 0; i < len(b); i += page {
		s += b[i]
	}
	runtime.KeepAlive(s) // the reads are the point
}

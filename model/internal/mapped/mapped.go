package mapped

import (
	"fmt"
	"io"
	"os"
)

// File is an open, mapped file.
type File struct {
	// Path is the name the file was opened by.
	Path string
	// Data is the file's bytes; read only.
	Data   []byte
	unmap  func([]byte) error
	closed bool
}

// Open maps the regular file at path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	size := st.Size()
	if size == 0 {
		return &File{Path: path, Data: []byte{}}, nil
	}
	if int64(int(size)) != size || size < 0 {
		return nil, fmt.Errorf("%s: %d bytes do not fit in this platform's address space", path, size)
	}
	if data, unmap, err := mmap(f, int(size)); err == nil {
		return &File{Path: path, Data: data, unmap: unmap}, nil
	}
	// No mapping (another platform, or a file system that refuses it): read
	// exactly the size stat reported, never more.
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{Path: path, Data: data}, nil
}

// Mapped reports whether Data is a memory mapping (rather than a copy).
func (f *File) Mapped() bool { return f.unmap != nil }

// Close unmaps the file. Data must not be used afterwards.
func (f *File) Close() error {
	if f == nil || f.closed {
		return nil
	}
	f.closed = true
	d := f.Data
	f.Data = nil
	if f.unmap != nil {
		return f.unmap(d)
	}
	return nil
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

// Package bounded reads small files (configs, indexes, tokenizers) whole,
// never more than a limit the caller gives.
//
// Checking a file's size with Stat and then calling os.ReadFile is not
// enough: a device (/dev/zero) or a symlink to one reports size 0 and then
// reads for ever, opening a named pipe with no writer blocks for ever, and a
// regular file may grow in between. Open refuses what is not a regular file
// (after symlinks) before opening it, for ReadFile and for readers that map
// a file (model/internal/mapped); ReadFile reads through a limit, so the
// memory and time it takes are bounded whatever the path names.
//
// Invariant: ReadFile allocates at most limit+1 bytes beyond its buffer's
// growth, and an over-long file is an error wrapping ErrTooLarge (never a
// truncated result).
package bounded

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is wrapped by ReadFile's error for a file over its limit.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is wrapped by Open's and ReadFile's error for a path that
// names a device, a pipe or a socket.
var ErrNotRegular = errors.New("not a regular file")

// Open opens the regular file at path (after symlinks) and returns it with
// its Stat, having refused anything else before opening it: a directory is
// an error saying so, a device, pipe or socket one wrapping ErrNotRegular.
func Open(path string) (*os.File, os.FileInfo, error) {
	notRegular := func(st os.FileInfo) error {
		if st.IsDir() {
			return fmt.Errorf("%s is a directory, not a file", path)
		}
		return fmt.Errorf("%s is not a regular file (%s): %w", path, st.Mode().Type(), ErrNotRegular)
	}
	if st, err := os.Stat(path); err != nil {
		return nil, nil, err
	} else if !st.Mode().IsRegular() {
		return nil, nil, notRegular(st)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	// What was opened is checked again: the path may have been replaced
	// between the two.
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = notRegular(st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ReadFile returns the whole content of path if it is at most limit bytes.
// A directory, or content past limit, is an error naming the path.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d bytes, the most it may be: %w", path, st.Size(), limit, ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s holds more than %d bytes, the most it may: %w", path, limit, ErrTooLarge)
	}
	return data, nil
}

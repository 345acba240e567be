package llama2c

import (
	"fmt"
	"io"
	"math"
	"os"
)

// readBounded reads the file at path without trusting it: first head bytes,
// from which limit says how many bytes the whole file may hold (ok false:
// the head is invalid, and the head alone is returned for the parser to
// say why); then at most that many, plus one byte to reveal trailing data,
// and never more than a regular file's size. A device, a pipe or a huge
// file thus costs at most what its header justifies, not all of memory.
func readBounded(path, what string, head int, limit func(head []byte) (int64, bool)) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("llama2c: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("llama2c: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("llama2c: %s is a directory, not a %s file", path, what)
	}
	hdr := make([]byte, head)
	n, err := io.ReadFull(f, hdr)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("llama2c: %w", err)
	}
	if n < head {
		return hdr[:n], nil
	}
	most, ok := limit(hdr)
	if !ok {
		return hdr, nil
	}
	if st.Mode().IsRegular() && st.Size() > most {
		return nil, malformed("%s %s is %d bytes, more than the %d its header allows (%d trailing bytes, or not a %s file)",
			what, path, st.Size(), most, st.Size()-most, what)
	}
	want := satAdd(most, 1) // one more reveals trailing data
	if st.Mode().IsRegular() {
		want = min(want, st.Size())
	}
	if want > math.MaxInt-1 {
		return nil, malformed("%s %s: its header implies %d bytes, more than this machine can address", what, path, most)
	}
	data := make([]byte, head, max(int64(head), min(want, 1<<20)))
	copy(data, hdr)
	rest, err := io.ReadAll(io.LimitReader(f, want-int64(head)))
	if err != nil {
		return nil, fmt.Errorf("llama2c: %w", err)
	}
	return append(data, rest...), nil
}

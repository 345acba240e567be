package mapped

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Source bounds every slice by its bytes; given bytes outlive Close and
// are never retained; a mapped file's Source ends at Close but for what
// Retain keeps.
func TestSource(t *testing.T) {
	data := []byte("0123456789")
	for _, c := range []struct {
		off, size int64
		want      string // "-" for nil
	}{
		{0, 10, "0123456789"}, {3, 4, "3456"}, {10, 0, ""}, {9, 2, "-"}, {11, 0, "-"}, {-1, 2, "-"}, {2, -1, "-"},
		{4, 1 << 62, "-"},
	} {
		src := Given(data)
		got := src.Slice(c.off, c.size)
		if c.want == "-" {
			if got != nil {
				t.Errorf("Slice(%d, %d) = %q, want nil", c.off, c.size, got)
			}
			continue
		}
		if string(got) != c.want || cap(got) != len(got) {
			t.Errorf("Slice(%d, %d) = %q (cap %d), want %q with its capacity cut", c.off, c.size, got, cap(got), c.want)
		}
	}
	given := Given(data)
	if _, ok := given.Retain(given.Slice(0, 4)); ok {
		t.Error("given bytes were retained")
	}
	if err := given.Close(); err != nil || given.Closed() || string(given.Slice(0, 2)) != "01" {
		t.Errorf("given bytes after Close: %v, closed %v", err, given.Closed())
	}

	p := filepath.Join(t.TempDir(), "f")
	want := bytes.Repeat([]byte("reprise"), 1000)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := OpenWith(p, "test", func(name string, s Source) (*Source, error) { return &s, nil })
	if err != nil {
		t.Fatal(err)
	}
	b := src.Slice(7, 7)
	release, ok := src.Retain(b)
	if !ok {
		t.Fatal("a mapped file's bytes were not retained")
	}
	if err := src.Close(); err != nil || !src.Closed() || src.Slice(0, 1) != nil {
		t.Fatalf("after Close: %v, closed %v", err, src.Closed())
	}
	if string(b) != "reprise" {
		t.Errorf("retained bytes after Close: %q", b)
	}
	release()
	if _, ok := src.Retain(b); ok {
		t.Error("retained from a closed Source")
	}
}

// OpenWith wraps an error mapping the file with the reader's prefix,
// returns a parse error as it is, and then releases the mapping.
func TestOpenWithErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenWith(filepath.Join(dir, "missing"), "reader", func(string, Source) (int, error) { return 1, nil })
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "reader: ") {
		t.Errorf("a missing file: %v", err)
	}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("bad"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("bad header")
	var m *File
	_, err = OpenWith(p, "reader", func(_ string, s Source) (int, error) { m = s.m; return 0, bad })
	if err != bad {
		t.Errorf("a parse error came back as %v", err)
	}
	if m == nil || !m.closed {
		t.Error("a parse error left the mapping open")
	}
}

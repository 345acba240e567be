package bounded

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// files makes, in a new directory, a regular file of ten bytes, a symlink
// to /dev/zero and a named pipe.
func files(t *testing.T) (dir, small, zero, fifo string) {
	t.Helper()
	dir = t.TempDir()
	small, zero, fifo = filepath.Join(dir, "small"), filepath.Join(dir, "zero"), filepath.Join(dir, "fifo")
	if err := os.WriteFile(small, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, small, zero, fifo
}

func TestReadFile(t *testing.T) {
	dir, small, zero, fifo := files(t)
	for _, c := range []struct {
		name    string
		path    string
		limit   int64
		want    string
		tooBig  bool
		special bool
		wantErr bool
	}{
		{name: "under", path: small, limit: 100, want: "0123456789"},
		{name: "exact", path: small, limit: 10, want: "0123456789"},
		{name: "over", path: small, limit: 9, tooBig: true, wantErr: true},
		{name: "device behind a symlink", path: zero, limit: 1 << 20, special: true, wantErr: true},
		// Opening a named pipe without a writer would block for ever.
		{name: "fifo", path: fifo, limit: 1 << 20, special: true, wantErr: true},
		{name: "directory", path: dir, limit: 100, wantErr: true},
		{name: "missing", path: filepath.Join(dir, "nope"), limit: 100, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadFile(c.path, c.limit)
			if (err != nil) != c.wantErr || errors.Is(err, ErrTooLarge) != c.tooBig || errors.Is(err, ErrNotRegular) != c.special {
				t.Fatalf("ReadFile(%s, %d) = %q, %v", c.path, c.limit, got, err)
			}
			if err == nil && string(got) != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// Open gives a regular file with its size, and refuses a directory, a
// device behind a symlink and a named pipe without opening them.
func TestOpen(t *testing.T) {
	dir, small, zero, fifo := files(t)
	f, st, err := Open(small)
	if err != nil || st.Size() != 10 {
		t.Fatalf("a regular file: %v", err)
	}
	f.Close()
	for _, c := range []struct {
		path    string
		special bool
	}{{dir, false}, {zero, true}, {fifo, true}, {filepath.Join(dir, "nope"), false}} {
		if f, _, err := Open(c.path); err == nil || errors.Is(err, ErrNotRegular) != c.special {
			f.Close()
			t.Errorf("Open(%s): %v", c.path, err)
		}
	}
}

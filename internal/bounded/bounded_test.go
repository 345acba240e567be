package bounded

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
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
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, st, err := Open(small)
	if err != nil || st.Size() != 10 {
		t.Fatalf("a regular file: %v", err)
	}
	f.Close()
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
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

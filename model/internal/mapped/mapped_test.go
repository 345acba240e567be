package mapped

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/reprise-ml/reprise/internal/bounded"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	want := bytes.Repeat([]byte("reprise"), 1000)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Data, want) {
		t.Fatal("mapped bytes differ from the file")
	}
	if runtime.GOOS == "linux" && !f.Mapped() {
		t.Error("not memory-mapped on linux")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.Data != nil || f.Close() != nil {
		t.Error("Close is not idempotent or leaves Data")
	}

	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := Open(empty); err != nil || len(f.Data) != 0 {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := Open(dir); err == nil {
		t.Error("a directory opened")
	}
	// Opening a named pipe without a writer would block for ever.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(fifo); !errors.Is(err, bounded.ErrNotRegular) {
		t.Errorf("a named pipe: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestOpenDevZero(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	// A device reports size 0 and reads forever: refused, never read.
	if _, err := Open("/dev/zero"); err == nil {
		t.Fatal("/dev/zero opened")
	}
}

// TestRetain: a retained slice outlives Close until its release (the last
// one unmaps), a release counts once, and nothing is retained from a
// closed file or outside its bytes.
func TestRetain(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := bytes.Repeat([]byte("weights!"), 3*os.Getpagesize())
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.Data[10:5000], f.Data[8000:]
	relA, ok1 := f.Retain(a)
	relB, ok2 := f.Retain(b)
	if !ok1 || !ok2 {
		t.Fatal("Retain refused slices of the file")
	}
	if _, ok := f.Retain(append([]byte(nil), a...)); ok {
		t.Error("retained bytes that are not the file's")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Retain(a); ok {
		t.Error("retained a slice of a closed file")
	}
	relA()
	relA() // a second call does nothing: b's pages are still mapped
	if !bytes.Equal(b, want[8000:]) {
		t.Fatal("a retained slice changed after Close")
	}
	if f.all == nil {
		t.Fatal("unmapped while a slice is retained")
	}
	relB()
	if f.all != nil {
		t.Error("the last release did not unmap")
	}
}

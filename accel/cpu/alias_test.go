package cpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// aliasedMatMul checks that y = x·Wᵀ over weights the device reads in
// place (alias, a host-aliased tensor holding the bytes of wv) gives the
// bits of the same product over an uploaded copy, eager and replayed, and
// that nothing is written to the aliased bytes (their snapshot is
// compared afterwards).
func aliasedMatMul(t *testing.T, e *acceltest.Env, alias, copied accel.Tensor, host []byte, T int) {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	x := e.F32(acceltest.Rand(r, T*alias.Cols, 1), T, alias.Cols)
	y1, y2 := e.Zeros(accel.F32, T, alias.Rows), e.Zeros(accel.F32, T, alias.Rows)
	before := append([]byte(nil), host...)
	l := accel.On(e.S)
	l.MatMul(y1, x, copied)
	l.MatMul(y2, x, alias)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	want := e.ReadF32(y1)
	if i, ok := bitsEqual(e.ReadF32(y2), want); !ok {
		t.Fatalf("eager: y[%d] over aliased weights differs from over a copy", i)
	}
	e.Zero(y2)
	pool, _ := e.Dev.NewPool()
	defer pool.Release()
	g, err := accel.Capture(e.S, pool, func() error {
		l := accel.On(e.S)
		l.MatMul(y2, x, alias)
		return l.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	for range 2 {
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		if i, ok := bitsEqual(e.ReadF32(y2), want); !ok {
			t.Fatalf("replay: y[%d] over aliased weights differs from over a copy", i)
		}
	}
	if string(before) != string(host) {
		t.Fatal("the aliased host bytes changed")
	}
}

// TestAliasHost: a host-aliased buffer reads the caller's bytes in place
// (the same bits as a copy, eager and replayed, packed or not), is charged
// to the arena, refuses every write, and gives the bytes back (release,
// once) when freed or when the device closes.
func TestAliasHost(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const T, in, out = 3, 40, 50
	for _, packing := range []bool{false, true} {
		for _, dt := range []accel.DType{accel.F32, accel.BF16} {
			t.Run(fmt.Sprintf("%s/packed=%v", dt, packing), func(t *testing.T) {
				if packing {
					withPacking(t)
				}
				e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
				dev := e.Dev.(*Device)
				wv := acceltest.Rand(r, out*in, 1)
				var host []byte
				var copied accel.Tensor
				if dt == accel.BF16 {
					host, _ = acceltest.BF16Bits(wv)
					copied = e.BF16(wv, out, in)
				} else {
					host = accel.F32Bytes(wv)
					copied = e.F32(wv, out, in)
				}
				free0 := dev.MemInfo().Free
				released := 0
				b, err := dev.AliasHost(host, func() { released++ })
				if err != nil {
					t.Fatal(err)
				}
				if got := free0 - dev.MemInfo().Free; got != int64(len(host)) || dev.AliasedBytes() != int64(len(host)) {
					t.Fatalf("aliasing %d bytes took %d of the arena (AliasedBytes %d)", len(host), got, dev.AliasedBytes())
				}
				alias := accel.Tensor{Buf: b, DType: dt, Rows: out, Cols: in}
				aliasedMatMul(t, e, alias, copied, host, T)
				if packing && dev.PackedBytes() == 0 {
					t.Error("aliased weights were not packed")
				}
				if err := dev.Free(b.Slice(0, 8)); !errors.Is(err, accel.ErrInvalidArgument) || released != 0 {
					t.Errorf("freeing part of an alias: %v (released %d times)", err, released)
				}
				if err := e.S.Free(b); !errors.Is(err, accel.ErrInvalidArgument) || released != 0 {
					t.Errorf("a stream-ordered free of an alias: %v (released %d times)", err, released)
				}
				packed := dev.PackedBytes()
				if err := dev.Free(b); err != nil || released != 1 {
					t.Fatalf("free: %v, released %d times", err, released)
				}
				if err := dev.Free(b); !errors.Is(err, accel.ErrInvalidArgument) || released != 1 {
					t.Errorf("a second free: %v, released %d times", err, released)
				}
				// What is left charged is the copy's packed panels (made
				// after free0 was read), the alias's are gone.
				if dev.MemInfo().Free != free0-dev.PackedBytes() || dev.PackedBytes() != packed/2 || dev.AliasedBytes() != 0 {
					t.Errorf("after the free: %d bytes of the arena not given back, %d of %d packed bytes left", free0-dev.MemInfo().Free, dev.PackedBytes(), packed)
				}
			})
		}
	}
}

// TestAliasHostReadOnly: every way the device writes memory refuses an
// aliased buffer, eagerly and while capturing, and writes nothing.
func TestAliasHostReadOnly(t *testing.T) {
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	dev := e.Dev.(*Device)
	host := accel.F32Bytes([]float32{1, 2, 3, 4, 5, 6, 7, 8})
	want := string(host)
	b, err := dev.AliasHost(host, func() {})
	if err != nil {
		t.Fatal(err)
	}
	w := accel.Tensor{Buf: b, DType: accel.F32, Rows: 2, Cols: 4}
	src := e.F32(make([]float32, 8), 2, 4)
	x := e.F32(acceltest.Ones(8), 2, 4)
	writes := map[string]func(l *accel.Launcher){
		"fill":     func(l *accel.Launcher) { l.FillF32(w, 0) },
		"copy":     func(l *accel.Launcher) { l.Copy(w, src) },
		"add":      func(l *accel.Launcher) { l.Add(w, x, x) },
		"matmul":   func(l *accel.Launcher) { l.MatMul(accel.Tensor{Buf: b, DType: accel.F32, Rows: 2, Cols: 2}, x, x) },
		"rms norm": func(l *accel.Launcher) { l.RMSNorm(w, x, x.RowSlice(0, 1), 1e-5) },
	}
	for name, write := range writes {
		l := accel.On(e.S)
		write(l)
		if err := l.Err(); !errors.Is(err, accel.ErrInvalidArgument) {
			t.Errorf("%s into an aliased buffer: %v", name, err)
		}
		pool, _ := dev.NewPool()
		_, err := accel.Capture(e.S, pool, func() error {
			l := accel.On(e.S)
			write(l)
			return l.Err()
		})
		pool.Release()
		if !errors.Is(err, accel.ErrInvalidArgument) {
			t.Errorf("%s into an aliased buffer while capturing: %v", name, err)
		}
	}
	if err := accel.Upload(e.S, b, make([]byte, b.Len())); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Errorf("an upload into an aliased buffer: %v", err)
	}
	if err := e.S.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if string(host) != want {
		t.Fatal("an aliased buffer was written")
	}
}

// TestAliasHostRefusals: unaligned bytes are declined (ErrUnsupported,
// the caller uploads a copy), bytes beyond the arena are out of memory,
// and neither is released nor charged; a device that closes releases what
// it still aliases.
func TestAliasHostRefusals(t *testing.T) {
	dev, err := Open(accel.Options{MemoryLimit: 4 << 20, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	released := 0
	rel := func() { released++ }
	buf := alignedBytes(4096)
	if _, err := dev.AliasHost(buf[4:1028], rel); !errors.Is(err, accel.ErrUnsupported) {
		t.Errorf("unaligned bytes: %v", err)
	}
	if _, err := dev.AliasHost(make([]byte, 8<<20), rel); !errors.Is(err, accel.ErrOutOfMemory) {
		t.Errorf("bytes beyond the arena: %v", err)
	}
	if _, err := dev.AliasHost(nil, rel); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Errorf("no bytes: %v", err)
	}
	if released != 0 || dev.MemInfo().Free != 4<<20 {
		t.Fatalf("refusals released %d times, left %d bytes charged", released, 4<<20-dev.MemInfo().Free)
	}
	for range 2 {
		if _, err := dev.AliasHost(buf[64:], rel); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Close(); err != nil || released != 2 {
		t.Fatalf("close: %v, released %d of 2", err, released)
	}
	if _, err := dev.AliasHost(buf, rel); !errors.Is(err, accel.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
}

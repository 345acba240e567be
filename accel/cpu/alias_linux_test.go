package cpu

import (
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// TestAliasHostReadOnlyMapping runs kernels over weights in memory the
// process cannot write (a mapping made read only, as a weight file's is):
// a write by the device would kill the test with SIGSEGV. Reads give the
// bits of an uploaded copy, packed or not, eager and replayed; writes are
// refused.
func TestAliasHostReadOnlyMapping(t *testing.T) {
	const T, in, out = 2, 64, 48
	for _, packing := range []bool{false, true} {
		if packing {
			withPacking(t)
		}
		e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
		wv := acceltest.Rand(rand.New(rand.NewPCG(5, 6)), out*in, 1)
		bits, _ := acceltest.BF16Bits(wv)
		page, err := syscall.Mmap(-1, 0, len(bits), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			t.Skipf("mmap: %v", err)
		}
		copy(page, bits)
		if err := syscall.Mprotect(page, syscall.PROT_READ); err != nil {
			t.Fatal(err)
		}
		unmapped := false
		b, err := e.Dev.(accel.HostAliaser).AliasHost(page, func() { unmapped = syscall.Munmap(page) == nil })
		if err != nil {
			t.Fatal(err)
		}
		alias := accel.Tensor{Buf: b, DType: accel.BF16, Rows: out, Cols: in}
		aliasedMatMul(t, e, alias, e.BF16(wv, out, in), page, T)
		l := accel.On(e.S)
		l.Copy(alias, e.BF16(wv, out, in))
		if err := l.Err(); !errors.Is(err, accel.ErrInvalidArgument) {
			t.Fatalf("a copy into read-only host memory: %v", err)
		}
		if err := e.S.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := e.Dev.Free(b); err != nil || !unmapped {
			t.Fatalf("free: %v (unmapped %v)", err, unmapped)
		}
	}
}

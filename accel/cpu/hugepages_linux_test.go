package cpu

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// anonHugeKB is the AnonHugePages of the mapping of /proc/self/smaps that
// holds addr, in kB (-1: no mapping holds it).
func anonHugeKB(t *testing.T, addr uintptr) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); ok && in {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("smaps: %q: %v", line, err)
			}
			return kb
		}
	}
	return -1
}

// TestPacksGetHugePages: where the kernel gives madvised memory huge pages,
// a pack set of a few MiB really lies on them (its mapping's
// AnonHugePages), and it is the heap packing's bytes.
func TestPacksGetHugePages(t *testing.T) {
	if !hugePagesOn() {
		t.Skip("huge pages are off here: ", hugeWhy())
	}
	r := rand.New(rand.NewPCG(9, 10))
	a := &hugeAlloc{}
	const out, in = 1024, 512 // 2 MiB of float32 panels a matrix
	var ps []*packed
	for range 2 {
		v := make([]float32, out*in)
		for i := range v {
			v[i] = r.Float32()
		}
		w := operand{b: accel.F32Bytes(v), rows: out, cols: in, dt: accel.F32}
		p := packWeightsIn(w, a)
		if p.owner == nil {
			t.Fatal("a 2 MiB pack is not on a huge-page chunk")
		}
		if !bytes.Equal(p.data, packWeights(w).data) {
			t.Fatal("the pack's bytes differ from the heap pack's")
		}
		ps = append(ps, p)
	}
	kb := anonHugeKB(t, uintptr(unsafe.Pointer(&ps[0].data[0])))
	if kb < 0 {
		t.Fatal("no mapping in /proc/self/smaps holds the pack")
	}
	// 4 MiB from the start of a 2 MiB-aligned chunk: two whole huge pages.
	// A kernel short of free huge pages may back some with small ones (the
	// defrag setting decides how hard it tries), but not all of them.
	if kb < 2048 { // at least one
		d, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/defrag")
		t.Fatalf("4 MiB of packs on %d kB of huge pages (defrag: %s)", kb, strings.TrimSpace(string(d)))
	}
	t.Logf("4 MiB of packs on %d kB of huge pages", kb)
	runtime.KeepAlive(ps)
}

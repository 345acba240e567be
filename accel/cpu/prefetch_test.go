package cpu

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestPrefetchLimit(t *testing.T) {
	for _, tc := range []struct {
		env  string
		llc  int64
		want int64
		err  bool
	}{
		{"", 32 << 20, 32 << 20, false},
		{"auto", 480 << 20, 480 << 20, false},
		{"", 0, math.MaxInt64, false}, // cache unknown: prefetch
		{"1", 32 << 20, math.MaxInt64, false},
		{"0", 32 << 20, -1, false},
		{"yes", 32 << 20, 0, true},
	} {
		got, err := prefetchLimit(tc.env, tc.llc)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("prefetchLimit(%q, %d) = %d, %v; want %d, error %v", tc.env, tc.llc, got, err, tc.want, tc.err)
		}
	}
}

// TestPrefetchPanels: the kernels prefetch while the packed weights are
// within the limit, not past it.
func TestPrefetchPanels(t *testing.T) {
	d := &Device{pfLimit: 1000}
	if !d.prefetchPanels() {
		t.Error("no packed weights: no prefetch")
	}
	d.packs.bytes.Store(1000)
	if !d.prefetchPanels() {
		t.Error("packed weights at the limit: no prefetch")
	}
	d.packs.bytes.Store(1001)
	if d.prefetchPanels() {
		t.Error("packed weights past the limit: prefetch")
	}
	var nilDev *Device
	if !nilDev.prefetchPanels() {
		t.Error("no device (kernel tests): no prefetch")
	}
}

// TestLastLevelCache reads a sysfs-like tree: the highest level of data or
// unified cache, instruction caches left out.
func TestLastLevelCache(t *testing.T) {
	dir := t.TempDir()
	for name, f := range map[string][3]string{
		"index0": {"Data", "1", "48K"},
		"index1": {"Instruction", "1", "32K"},
		"index2": {"Unified", "2", "2048K"},
		"index3": {"Unified", "3", "491520K"},
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, file := range []string{"type", "level", "size"} {
			if err := os.WriteFile(filepath.Join(p, file), []byte(f[i]+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := lastLevelCacheIn(dir), int64(491520<<10); got != want {
		t.Errorf("lastLevelCacheIn = %d, want %d", got, want)
	}
	if got := lastLevelCacheIn(filepath.Join(dir, "none")); got != 0 {
		t.Errorf("no cache files: %d, want 0", got)
	}
}

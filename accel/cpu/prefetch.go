package cpu

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Software prefetch of packed weights.
//
// The VNNI quantized kernels (quant_vnni_amd64.go) can prefetch, while they
// read a panel, the next panel's lines (PREFETCHT0). Whether that helps
// depends on where the weights come from, measured on a 2-core Intel Xeon
// with AVX-512 VNNI and a 480 MiB L3 (docs/BENCH.md, "An Intel Xeon with
// AMX and a 480 MiB L3"):
//   - weights the last-level cache holds (the 110M Q4_0 file, 65 MB):
//     batch-1 decode 638-653 tok/s with the prefetch, 513-559 without;
//   - weights that stream from memory every step (the 1B Q4_K_M file,
//     630 MB read per step): 33.0-33.5 tok/s with it, 40.7-41.0 without,
//     and slower with it at 16 and 64 sequences and in a 512-token prefill
//     too. Each prefetch to L1 holds a line-fill buffer for a memory
//     latency, which the core's demand loads and its own L2 streamer (which
//     follows a sequential read well) then lack; a prefetch from the L3
//     returns soon enough to be ahead of the kernel.
// So by default the kernels prefetch while the packed weights fit in the
// last-level cache and not once they outgrow it. EnvPrefetch overrides
// that, for measuring the two on another machine.

// EnvPrefetch chooses the quantized kernels' prefetch of the next panel:
// "1" always, "0" never, "auto" or unset: while the device's packed
// weights fit in the CPU's last-level cache.
const EnvPrefetch = "REPRISE_CPU_PREFETCH"

// prefetchLimit is the packed bytes above which the kernels stop
// prefetching, from EnvPrefetch's value and the last-level cache's size
// (0: unknown): -1 never prefetches, math.MaxInt64 always does.
func prefetchLimit(env string, llc int64) (int64, error) {
	switch env {
	case "1":
		return math.MaxInt64, nil
	case "0":
		return -1, nil
	case "", "auto":
		if llc <= 0 {
			return math.MaxInt64, nil
		}
		return llc, nil
	}
	return 0, fmt.Errorf("cpu: %s=%q: want 1, 0 or auto", EnvPrefetch, env)
}

// prefetchPanels reports whether the quantized kernels prefetch the next
// panel now: the device's packed weights so far against its limit.
func (d *Device) prefetchPanels() bool {
	if d == nil {
		return true
	}
	return d.packs.bytes.Load() <= d.pfLimit
}

// prefetchMode is prefetchLimit for this process's environment and CPU,
// read once, as hugeMode is.
var prefetchMode = sync.OnceValues(func() (int64, error) {
	return prefetchLimit(os.Getenv(EnvPrefetch), LastLevelCache())
})

// logPrefetch says once, at the first device's opening, up to how many
// bytes of packed weights the kernels prefetch (debug level:
// REPRISE_LOG=debug).
var logPrefetch = sync.OnceFunc(func() {
	// Open calls it only once prefetchMode has no error.
	switch limit, _ := prefetchMode(); {
	case limit < 0:
		slog.Debug("cpu: quantized kernels never prefetch the next panel", "why", EnvPrefetch+"=0")
	case limit == math.MaxInt64:
		slog.Debug("cpu: quantized kernels always prefetch the next panel")
	default:
		slog.Debug("cpu: quantized kernels prefetch the next panel while the packed weights fit in the last-level cache", "cache_bytes", limit)
	}
})

// LastLevelCache is the size in bytes of the CPU's largest data or
// unified cache, from Linux's sysfs (0 where it cannot be read), read
// once per process (every Device's Open asks). On a shared machine this
// process may hold less of it.
func LastLevelCache() int64 { return lastLevelCache() }

var lastLevelCache = sync.OnceValue(func() int64 {
	return lastLevelCacheIn("/sys/devices/system/cpu/cpu0/cache")
})

func lastLevelCacheIn(dir string) int64 {
	dirs, _ := filepath.Glob(filepath.Join(dir, "index*"))
	var best, level int64
	for _, d := range dirs {
		typ, _ := os.ReadFile(filepath.Join(d, "type"))
		if t := strings.TrimSpace(string(typ)); t != "Unified" && t != "Data" {
			continue
		}
		lv, err1 := os.ReadFile(filepath.Join(d, "level"))
		sz, err2 := os.ReadFile(filepath.Join(d, "size"))
		if err1 != nil || err2 != nil {
			continue
		}
		l, err1 := strconv.ParseInt(strings.TrimSpace(string(lv)), 10, 64)
		n, err2 := ParseBytes(strings.TrimSpace(string(sz))) // "32768K"
		if err1 == nil && err2 == nil && l >= level {
			best, level = n, l
		}
	}
	return best
}

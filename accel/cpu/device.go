package cpu

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// Environment variables the CPU device reads when Options leave a value at 0.
const (
	// EnvMemory is the arena capacity: bytes, or a number with a KiB, MiB,
	// GiB (or K, M, G) suffix.
	EnvMemory = "REPRISE_CPU_MEMORY"
	// EnvThreads is the number of threads kernels use.
	EnvThreads = "REPRISE_CPU_THREADS"
)

// ExecBytesPerNode is the device memory an instantiated graph holds per node,
// outside any pool: the resolved operands of each recorded call.
const ExecBytesPerNode = 512

func init() { accel.Register(backend{}) }

type backend struct{}

func (backend) Name() string { return "cpu" }
func (backend) Probe() error { return nil }
func (b backend) Devices() ([]accel.DeviceInfo, error) {
	return []accel.DeviceInfo{info(0)}, nil
}

func info(ord int) accel.DeviceInfo {
	detail := fmt.Sprintf("pure Go, %s kernels, %s/%s, %d threads", KernelSet(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	if hugePagesOn() && (packingOn() || quantVec.Load()) {
		detail += ", packed weights on huge pages"
	}
	return accel.DeviceInfo{Backend: "cpu", Ordinal: ord, Name: cpuName(), Vendor: cpuVendor(), Detail: detail}
}

func (backend) Open(ordinal int, opts accel.Options) (accel.Device, error) {
	if ordinal != 0 {
		return nil, fmt.Errorf("cpu: no device %d (there is one, 0)", ordinal)
	}
	return Open(opts)
}

// deviceMemory is alloc.DeviceMemory under a name that keeps the embedded
// field unexported.
type deviceMemory = alloc.DeviceMemory

// Device is the CPU device.
type Device struct {
	*deviceMemory // MemInfo, Allocator, Caching, Alloc, NewPool
	info          accel.DeviceInfo
	budget        *alloc.Budget // the arena: segments, executables, packed weights
	work          *workers
	threads       int
	traceEvery    uint64 // EnvScheduleTrace
	pfLimit       int64  // packed bytes up to which the kernels prefetch (prefetch.go)
	packs         packTable

	mu      sync.Mutex
	streams map[*stream]struct{}
	aliases map[*mem]struct{} // host-aliased segments (alias.go)
	nextID  int64
	closed  bool
}

// Open opens the CPU device.
func Open(opts accel.Options) (*Device, error) {
	capacity := opts.MemoryLimit
	if capacity == 0 {
		if v := os.Getenv(EnvMemory); v != "" {
			n, err := ParseBytes(v)
			if err != nil {
				return nil, fmt.Errorf("cpu: %s: %w", EnvMemory, err)
			}
			capacity = n
		} else {
			capacity = DefaultCapacity()
		}
	}
	budget, err := alloc.NewBudget("cpu", capacity)
	if err != nil {
		return nil, err
	}
	threads := opts.Threads
	if threads == 0 {
		if v := os.Getenv(EnvThreads); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("cpu: %s=%q: want a positive integer", EnvThreads, v)
			}
			threads = n
		} else {
			threads = runtime.GOMAXPROCS(0)
		}
	}
	var every uint64
	if v := os.Getenv(EnvScheduleTrace); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("cpu: %s=%q: want a number of replays (0: off)", EnvScheduleTrace, v)
		}
		every = n
	}
	pf, err := prefetchMode()
	if err != nil {
		return nil, err
	}
	logPrefetch()
	d := &Device{info: info(0), budget: budget, threads: threads, traceEvery: every, pfLimit: pf, streams: map[*stream]struct{}{}, aliases: map[*mem]struct{}{}}
	d.deviceMemory = alloc.NewDeviceMemory(budget, source{d}, d.check)
	d.packs.init(d)
	logHugePages()
	d.work = newWorkers(d, threads)
	return d, nil
}

// DefaultCapacity is a quarter of the machine's memory (4 GiB where it cannot
// be read).
func DefaultCapacity() int64 {
	if total := physicalMemory(); total > 0 {
		return total / 4
	}
	return 4 << 30
}

func physicalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			fs := strings.Fields(rest)
			if len(fs) >= 1 {
				kb, err := strconv.ParseInt(fs[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

func cpuName() string {
	if v := cpuinfo("model name"); v != "" {
		return v
	}
	return runtime.GOARCH + " CPU"
}

// cpuVendor is who made the CPU (Intel, AMD, ...), from /proc/cpuinfo;
// "unknown" where it does not say. Not the architecture: the Detail says that.
func cpuVendor() string {
	switch v := cpuinfo("vendor_id"); v {
	case "GenuineIntel":
		return "Intel"
	case "AuthenticAMD":
		return "AMD"
	case "":
	default:
		return v
	}
	// ARM CPUs name their implementer by code.
	switch cpuinfo("CPU implementer") {
	case "0x41":
		return "ARM"
	case "0x61":
		return "Apple"
	case "0x51":
		return "Qualcomm"
	case "0x48":
		return "HiSilicon"
	case "0xc0":
		return "Ampere"
	}
	return "unknown"
}

// cpuinfo is the first value of a /proc/cpuinfo field, or "".
func cpuinfo(field string) string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == field {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// ParseBytes reads a byte count: "1073741824", "512MiB", "2G", "1.5GiB".
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.m
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("bad byte count %q (want e.g. 4GiB, 512MiB or a number of bytes)", s)
	}
	return int64(f * float64(mult)), nil
}

// Info names the device.
func (d *Device) Info() accel.DeviceInfo { return d.info }

// Capability is fixed for the CPU device.
func (d *Device) Capability() accel.Capability {
	return accel.Capability{Available: true, PinnedMemory: true, GraphCapture: true, GraphUpdate: true,
		MemoryTotal: d.budget.Capacity(), Deterministic: true, ComputeUnits: d.threads, KVCacheF16: true}
}

// Threads is the number of threads kernels use.
func (d *Device) Threads() int { return d.threads }

type source struct{ d *Device }

func (s source) AllocSegment(n int64) (accel.Memory, error) {
	if err := s.d.budget.Charge(n); err != nil {
		return nil, err
	}
	return newMem(n), nil
}

func (s source) FreeSegment(m accel.Memory) {
	s.d.packs.dropMem(m.(*mem))
	s.d.budget.Uncharge(m.Size())
	m.(*mem).b = nil
}

func (s source) MemInfo() accel.MemInfo { return s.d.MemInfo() }

// Free returns a buffer from Alloc, and drops the packed copy of any weights
// it held (their memory goes back to the arena at once).
func (d *Device) Free(b accel.Buffer) error {
	if m, ok := b.Memory().(*mem); ok && m.readOnly {
		if b.Offset() != 0 || b.Len() != m.Size() || !d.freeAlias(m) {
			return fmt.Errorf("cpu: free %v: not a whole host-aliased buffer of this device: %w", b, accel.ErrInvalidArgument)
		}
		return nil
	}
	if m, off := memOf(b); m != nil && ownBuffer(b) {
		d.packs.dropRange(m, off, b.Len())
	}
	return d.deviceMemory.Free(b)
}

// AllocHost allocates host memory; on the CPU device all memory is "pinned".
func (d *Device) AllocHost(n int64) (accel.HostBuffer, error) {
	if n < 0 {
		return accel.HostBuffer{}, fmt.Errorf("cpu: negative host allocation %d: %w", n, accel.ErrInvalidArgument)
	}
	return accel.NewHostBuffer(&hostMem{b: make([]byte, n)}), nil
}

// FreeHost releases host memory (the garbage collector does the work).
func (d *Device) FreeHost(h accel.HostBuffer) error { return nil }

// NewEvent makes an event.
func (d *Device) NewEvent() (accel.Event, error) { return &event{}, nil }

// Synchronize waits for every stream.
func (d *Device) Synchronize() error {
	d.mu.Lock()
	ss := slices.Collect(maps.Keys(d.streams))
	d.mu.Unlock()
	var first error
	for _, s := range ss {
		if err := s.drain(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close stops every stream and the workers.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	ss := slices.Collect(maps.Keys(d.streams))
	d.mu.Unlock()
	for _, s := range ss {
		s.Close()
	}
	d.work.close()
	d.packs.dropAll()
	d.mu.Lock()
	aliases := slices.Collect(maps.Keys(d.aliases))
	d.mu.Unlock()
	for _, m := range aliases {
		d.freeAlias(m)
	}
	return nil
}

func (d *Device) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("cpu: device: %w", accel.ErrClosed)
	}
	return nil
}

var (
	_ accel.Device       = (*Device)(nil)
	_ accel.WeightPacker = (*Device)(nil)
)

package accel

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Backend is one kind of device. Implementations register themselves in an
// init function, as database/sql drivers do.
type Backend interface {
	// Name is the registry key: "cpu", "opencl", "cuda".
	Name() string
	// Probe reports whether the backend can be used here, without
	// initialising anything: no library is loaded for good, no device opened.
	// A missing library is an error wrapping ErrBackendUnavailable that names
	// what was searched.
	Probe() error
	// Devices lists the backend's devices. It may initialise the backend's
	// library (not the devices themselves).
	Devices() ([]DeviceInfo, error)
	// Open opens device ordinal with backend-specific options.
	Open(ordinal int, opts Options) (Device, error)
}

// Options are the settings a device is opened with. Backends ignore what does
// not apply to them.
type Options struct {
	// MemoryLimit caps the device memory reprise uses, in bytes; 0 means the
	// backend's default (for the CPU device, its arena capacity).
	MemoryLimit int64
	// Threads is the number of host threads a CPU-side backend may use; 0
	// means all.
	Threads int
}

var (
	regMu    sync.RWMutex
	registry = map[string]Backend{}
)

// Register makes a backend available by its name. Registering a name twice
// panics: it is a programming error, like registering a sql driver twice.
func Register(b Backend) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[b.Name()]; dup {
		panic("accel: Register called twice for backend " + b.Name())
	}
	registry[b.Name()] = b
}

// Backends returns the registered backend names, sorted.
func Backends() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns a registered backend.
func Lookup(name string) (Backend, error) {
	regMu.RLock()
	b, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("accel: unknown backend %q (registered: %s): %w",
			name, strings.Join(Backends(), ", "), ErrBackendUnavailable)
	}
	return b, nil
}

// Probe reports whether the named backend is registered and usable here,
// initialising nothing.
func Probe(name string) error {
	b, err := Lookup(name)
	if err != nil {
		return err
	}
	return b.Probe()
}

// Open opens a device by backend name and ordinal.
func Open(name string, ordinal int, opts Options) (Device, error) {
	b, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := b.Probe(); err != nil {
		return nil, err
	}
	return b.Open(ordinal, opts)
}

// ParseDevice splits a device spec "backend" or "backend:ordinal".
func ParseDevice(spec string) (backend string, ordinal int, err error) {
	backend, ord, found := strings.Cut(spec, ":")
	if backend == "" {
		return "", 0, fmt.Errorf("accel: empty device spec %q", spec)
	}
	if found {
		if _, err := fmt.Sscanf(ord, "%d", &ordinal); err != nil || ordinal < 0 {
			return "", 0, fmt.Errorf("accel: bad device ordinal in %q", spec)
		}
	}
	return backend, ordinal, nil
}

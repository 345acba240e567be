package cpu

import (
	"fmt"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// Host-aliased buffers (accel.HostAliaser).
//
// The CPU device's memory is the process's, so a weight a file stores
// exactly as the device does need not be copied: AliasHost makes a segment
// whose bytes are the caller's (a memory-mapped file's pages). Such a
// segment is read only: Launch, Copy and CopyHtoD refuse to write it, so
// the device never writes a mapping (a read-only one would fault, a private
// one would silently grow a copy). Its bytes are charged to the arena like
// any segment, so MemInfo and capture planning see the weights as before;
// it never belongs to the caching allocator, and Device.Free (or Close)
// gives it back by calling the caller's release.

// aliasAlign is the alignment AliasHost asks of the bytes: every element
// type the kernels read (float32, int32, bf16, quantized blocks) is aligned
// within it, as in the allocator's segments.
const aliasAlign = 8

// AliasHost implements accel.HostAliaser.
func (d *Device) AliasHost(b []byte, release func()) (accel.Buffer, error) {
	if err := d.check(); err != nil {
		return accel.Buffer{}, err
	}
	if len(b) == 0 || release == nil {
		return accel.Buffer{}, fmt.Errorf("cpu: alias %d host bytes (release %v): %w", len(b), release != nil, accel.ErrInvalidArgument)
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%aliasAlign != 0 {
		return accel.Buffer{}, fmt.Errorf("cpu: alias host bytes at %#x: not %d-byte aligned: %w", p, aliasAlign, accel.ErrUnsupported)
	}
	n := int64(len(b))
	if err := d.budget.Charge(n); err != nil {
		return accel.Buffer{}, fmt.Errorf("cpu: alias %d host bytes: %w", n, err)
	}
	m := &mem{b: b[:len(b):len(b)], readOnly: true, release: release}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.budget.Uncharge(n)
		return accel.Buffer{}, fmt.Errorf("cpu: device: %w", accel.ErrClosed)
	}
	d.aliases[m] = struct{}{}
	d.mu.Unlock()
	return accel.NewBuffer(m, 0, n), nil
}

// AliasedBytes is the arena memory host-aliased buffers hold.
func (d *Device) AliasedBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for m := range d.aliases {
		n += m.Size()
	}
	return n
}

// freeAlias gives an aliased segment back: its packed copies, its charge,
// and the caller's bytes (release). It reports false for a segment that is
// not (or no longer) an alias of this device.
func (d *Device) freeAlias(m *mem) bool {
	d.mu.Lock()
	_, ok := d.aliases[m]
	delete(d.aliases, m)
	d.mu.Unlock()
	if !ok {
		return false
	}
	d.packs.dropMem(m)
	d.budget.Uncharge(m.Size())
	rel := m.release
	m.b, m.release = nil, nil
	rel()
	return true
}

// readOnly reports whether b aliases read-only host memory.
func readOnly(b accel.Buffer) bool {
	m, ok := b.Memory().(*mem)
	return ok && m.readOnly
}

// readOnlyErr is the error for a write to an aliased buffer, nil otherwise.
func readOnlyErr(what string, b accel.Buffer) error {
	if !readOnly(b) {
		return nil
	}
	return fmt.Errorf("cpu: %s writes %v, which aliases read-only host memory: %w", what, b, accel.ErrInvalidArgument)
}

var _ accel.HostAliaser = (*Device)(nil)

//go:build unix && !linux

package mapped

// populate reads the pages under b, a slice of the mapping all, in: a read
// of each page maps it.
func populate(all, b []byte) { touch(pageRange(all, b)) }

// drop does nothing: this system's syscall package has no madvise.
func drop(all, b []byte) {}

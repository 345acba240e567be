//go:build !reprise_failpoints

package failpoint

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Inject returns nil: failpoints are compiled out.
func Inject(string) error { return nil }

// Enter does nothing: failpoints are compiled out.
func Enter(string) func() { return nop }

func nop() {}

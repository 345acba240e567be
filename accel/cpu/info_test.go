package cpu

import (
	"runtime"
	"testing"
)

// The device's vendor is who made the CPU, not the architecture (which
// the Detail names).
func TestInfoVendor(t *testing.T) {
	inf := info(0)
	if inf.Vendor == "" || inf.Vendor == runtime.GOARCH {
		t.Errorf("vendor %q", inf.Vendor)
	}
	if runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "386") {
		switch v := cpuinfo("vendor_id"); v {
		case "GenuineIntel", "AuthenticAMD":
			if want := map[string]string{"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}[v]; inf.Vendor != want {
				t.Errorf("vendor_id %s gives vendor %q, want %q", v, inf.Vendor, want)
			}
		}
	}
	t.Logf("%+v", inf)
}

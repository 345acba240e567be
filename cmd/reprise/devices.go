package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	_ "github.com/reprise-ml/reprise/accel/cuda"
	_ "github.com/reprise-ml/reprise/accel/opencl"
)

func init() {
	register(command{name: "devices", summary: "list backends, devices and their capabilities", run: runDevices})
}

type deviceReport struct {
	Backend    string             `json:"backend"`
	Available  bool               `json:"available"`
	Reason     string             `json:"reason,omitempty"`
	Devices    []accel.DeviceInfo `json:"devices,omitempty"`
	Capability []accel.Capability `json:"capabilities,omitempty"`
}

func runDevices(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("devices", stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	var reports []deviceReport
	for _, name := range accel.Backends() {
		r := deviceReport{Backend: name}
		b, _ := accel.Lookup(name)
		if err := b.Probe(); err != nil {
			r.Reason = err.Error()
			reports = append(reports, r)
			continue
		}
		infos, err := b.Devices()
		if err != nil {
			r.Reason = err.Error()
			reports = append(reports, r)
			continue
		}
		r.Available = true
		for _, inf := range infos {
			dev, err := b.Open(inf.Ordinal, accel.Options{})
			if err != nil {
				r.Reason = fmt.Sprintf("%v: %v", inf, err)
				continue
			}
			r.Devices = append(r.Devices, dev.Info())
			r.Capability = append(r.Capability, dev.Capability())
			dev.Close()
		}
		reports = append(reports, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	for _, r := range reports {
		if !r.Available {
			fmt.Fprintf(stdout, "%s: unavailable: %s\n", r.Backend, r.Reason)
			continue
		}
		fmt.Fprintf(stdout, "%s: %d device(s)\n", r.Backend, len(r.Devices))
		for i, d := range r.Devices {
			c := r.Capability[i]
			fmt.Fprintf(stdout, "  %s:%d  %s\n", d.Backend, d.Ordinal, d.Name)
			if d.Detail != "" {
				fmt.Fprintf(stdout, "      %s\n", d.Detail)
			}
			fmt.Fprintf(stdout, "      memory %s, %d compute units\n", humanBytes(c.MemoryTotal), c.ComputeUnits)
			fmt.Fprintf(stdout, "      available=%v pinned=%v graphs=%v update=%v deterministic=%v\n",
				c.Available, c.PinnedMemory, c.GraphCapture, c.GraphUpdate, c.Deterministic)
		}
		if r.Reason != "" {
			fmt.Fprintf(stdout, "  (%s)\n", r.Reason)
		}
	}
	return nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

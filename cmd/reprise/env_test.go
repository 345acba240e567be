package main

import (
	"errors"
	"testing"

	"github.com/reprise-ml/reprise/engine"
)

// The engine's environment variables reach it through engine.Options, read
// once here; a flag given wins over the environment.
func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		name, cache, require string
		given                engine.Options
		wantCache            string
		wantRequire, wantErr bool
	}{
		{name: "unset"},
		{name: "cache", cache: "/tmp/plans", wantCache: "/tmp/plans"},
		{name: "flag wins", cache: "/tmp/plans", given: engine.Options{PlanCache: "off"}, wantCache: "off"},
		{name: "require", require: "1", wantRequire: true},
		{name: "require off", require: "0"},
		{name: "require bad", require: "yes", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(envPlanCache, c.cache)
			t.Setenv(envRequireGraphs, c.require)
			eo := c.given
			err := fromEnv(&eo)
			if c.wantErr {
				if !errors.Is(err, errUsage) {
					t.Fatalf("%s=%q: %v, want a usage error", envRequireGraphs, c.require, err)
				}
				return
			}
			if err != nil || eo.PlanCache != c.wantCache || eo.Runner.RequireGraphs != c.wantRequire {
				t.Fatalf("plan cache %q, require %v, err %v; want %q, %v", eo.PlanCache, eo.Runner.RequireGraphs, err, c.wantCache, c.wantRequire)
			}
		})
	}
}

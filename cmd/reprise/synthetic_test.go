package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// reprise synthetic writes exactly the weights --synthetic runs, in a file
// llama2c reads back whole.
func TestSyntheticWritesTheCheckpoint(t *testing.T) {
	out := filepath.Join(t.TempDir(), "6M.bin")
	code, stdout, stderr := runCLI(t, "synthetic", "--synthetic", "6M", "--seed", "7", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "dim 256") {
		t.Errorf("summary %q does not give the shape", stdout)
	}
	got, err := llama2c.LoadCheckpoint(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := llama.Synthetic("6M", 7)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config != want.Config {
		t.Fatalf("config %+v, want %+v", got.Config, want.Config)
	}
	if !reflect.DeepEqual(got.TokenEmbedding, want.TokenEmbedding) || !reflect.DeepEqual(got.Layers, want.Layers) ||
		!reflect.DeepEqual(got.RMSFinal, want.RMSFinal) {
		t.Fatal("the weights read back differ from llama.Synthetic's")
	}
	other, err := llama.Synthetic("6M", 8)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(got.TokenEmbedding, other.TokenEmbedding) {
		t.Fatal("--seed did not reach the weights")
	}
}

func TestSyntheticErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--out", filepath.Join(dir, "a.bin")}, 2, "--synthetic"},
		{[]string{"--synthetic", "6M"}, 2, "--out"},
		{[]string{"--synthetic", "7B", "--out", filepath.Join(dir, "b.bin")}, 2, "7B"},
		{[]string{"--synthetic", "6M", "--out", filepath.Join(dir, "no", "such", "c.bin")}, 1, "no such"},
	} {
		code, _, stderr := runCLI(t, append([]string{"synthetic"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%q: exit %d %q, want %d and %q", tc.args, code, stderr, tc.code, tc.msg)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("failed runs left %v behind", left)
	}
}

package llama2c

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/stories260k"
)

// The file loaders read no more than a file's header justifies: a device
// that never ends, a file with a huge tail, a truncated one, each gives a
// clear error naming the file, not an allocation of all memory.
func TestLoadBounded(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ckData, tokData := stories260k.Checkpoint(), stories260k.Tokenizer()
	ck, err := LoadCheckpoint(write("ok.bin", ckData))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokenizer(write("ok.tok", tokData), ck.Config.Vocab); err != nil {
		t.Fatal(err)
	}
	tail := append(bytes.Clone(ckData), make([]byte, 1<<20)...)
	cases := []struct {
		name string
		load func() error
		want string
	}{
		{"checkpoint with a tail", func() error { _, err := LoadCheckpoint(write("tail.bin", tail)); return err },
			"is 2105116 bytes, more than the 1056540 its header allows (1048576 trailing bytes"},
		{"truncated checkpoint", func() error { _, err := LoadCheckpoint(write("short.bin", ckData[:1000])); return err },
			"checkpoint truncated"},
		{"checkpoint header only", func() error { _, err := LoadCheckpoint(write("hdr.bin", ckData[:10])); return err },
			"the header needs 28 bytes"},
		{"tokenizer with a tail", func() error {
			_, err := LoadTokenizer(write("tail.tok", append(bytes.Clone(tokData), make([]byte, 1<<20)...)), ck.Config.Vocab)
			return err
		}, "more than the"},
		{"directory", func() error { _, err := LoadCheckpoint(dir); return err }, "is a directory"},
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases = append(cases,
			struct {
				name string
				load func() error
				want string
			}{"checkpoint /dev/zero", func() error { _, err := LoadCheckpoint("/dev/zero"); return err }, "dim=0 must be positive"},
			struct {
				name string
				load func() error
				want string
			}{"tokenizer /dev/zero", func() error { _, err := LoadTokenizer("/dev/zero", 512); return err }, "trailing bytes"})
	}
	for _, tc := range cases {
		err := tc.load()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if tc.name != "directory" && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v does not wrap ErrMalformed", tc.name, err)
		}
	}
}

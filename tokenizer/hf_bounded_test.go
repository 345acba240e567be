package tokenizer_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/tokenizer"
)

// A tokenizer.json that is a device behind a symlink is refused with
// ErrFormat naming the file, not read until memory runs out.
func TestLoadDirDevice(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	_, err := tokenizer.LoadDir(dir)
	if !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("got %v, want ErrFormat naming tokenizer.json", err)
	}
}

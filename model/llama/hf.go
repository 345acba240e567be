package llama

import "fmt"

type hfWeights struct{ Weights }

func (h *hfWeights) StopTokens() []int32 { return nil }

// OpenHF opens a Hugging Face model directory.
func OpenHF(dir string) (*hfWeights, error) {
	return nil, fmt.Errorf("llama: %s: %w", dir, ErrNotImplemented)
}

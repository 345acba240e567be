package graph

import (
	"fmt"
	"slices"
)

// DefaultBatchSizes are the batch sizes a config captures unless it says.
var DefaultBatchSizes = []int{1, 2, 4, 8, 16, 32, 64}

// Config is a model's declaration of what to capture for one walk. Exactly
// one of Batched and Packed is set.
type Config struct {
	// Walk is the walk the capture runs (its resources key per-slot state on
	// it).
	Walk string
	// ReplayWalks are other walks that may replay this capture (aliases).
	ReplayWalks []string
	// KeyInfo is extra bucket key (e.g. guidance on or off): a step replays
	// a bucket only when its key info is equal.
	KeyInfo string
	// Batched: every row carries the same number of tokens.
	Batched *Batched
	// Packed: rows carry different numbers of tokens, packed end to end.
	Packed *Packed
	// BatchSizes to capture; DefaultBatchSizes when empty.
	BatchSizes []int
	// CapEagerBatch: the largest captured batch size also caps the batch
	// the engine forms for this walk, eager or not (larger batches are
	// split). A config that captures only an acceleration subset leaves it
	// false.
	CapEagerBatch bool
	// SeqAxis overrides the sequence axis (0 rows, 1 columns, -1 none) of
	// named static inputs; others are detected on the largest capture as the
	// first axis whose size equals the bucket's token count.
	SeqAxis map[string]int
}

// Batched is a config whose rows all carry TokensPerRow tokens; a step of bs
// rows carries bs × TokensPerRow × Multiplier tokens (the multiplier packs
// several plans in one, e.g. a guided and an unguided pass).
type Batched struct {
	TokensPerRow int
	Multiplier   int // 0 means 1
}

// Packed is a config of ragged rows: each capture length is a bucket of
// total tokens, and Rows splits a bucket's tokens over its rows for the
// capture's dummy batch (nil: all on the first row).
type Packed struct {
	TokenLengths []int
	Rows         func(bs, tokens int) []int
}

// Validate checks a config and fills its defaults.
func (c *Config) Validate() error {
	if c.Walk == "" {
		return fmt.Errorf("graph: config without a walk")
	}
	if (c.Batched == nil) == (c.Packed == nil) {
		return fmt.Errorf("graph: config for walk %q must be exactly one of batched and packed", c.Walk)
	}
	if len(c.BatchSizes) == 0 {
		c.BatchSizes = slices.Clone(DefaultBatchSizes)
	}
	for _, bs := range c.BatchSizes {
		if bs < 1 {
			return fmt.Errorf("graph: config %q: batch size %d", c.Walk, bs)
		}
	}
	if b := c.Batched; b != nil {
		if b.TokensPerRow < 1 || b.Multiplier < 0 {
			return fmt.Errorf("graph: config %q: %d tokens per row, multiplier %d", c.Walk, b.TokensPerRow, b.Multiplier)
		}
	}
	if p := c.Packed; p != nil {
		if len(p.TokenLengths) == 0 {
			return fmt.Errorf("graph: packed config %q has no token lengths", c.Walk)
		}
		for _, n := range p.TokenLengths {
			if n < 1 {
				return fmt.Errorf("graph: packed config %q: token length %d", c.Walk, n)
			}
		}
	}
	for name, ax := range c.SeqAxis {
		if ax < -1 || ax > 1 {
			return fmt.Errorf("graph: config %q: sequence axis %d for input %q (want -1, 0 or 1)", c.Walk, ax, name)
		}
	}
	return nil
}

// Multiplier is the batched multiplier, 1 for packed configs.
func (c *Config) Multiplier() int {
	if c.Batched != nil && c.Batched.Multiplier > 0 {
		return c.Batched.Multiplier
	}
	return 1
}

// TokensFor is a batched config's token count for bs rows.
func (c *Config) TokensFor(bs int) int {
	return bs * c.Batched.TokensPerRow * c.Multiplier()
}

// Replays reports whether a step of walk may replay this config's captures.
func (c *Config) Replays(walk string) bool {
	return c.Walk == walk || slices.Contains(c.ReplayWalks, walk)
}

// Walks is the capture walk then its aliases.
func (c *Config) Walks() []string { return append([]string{c.Walk}, c.ReplayWalks...) }

// shapes lists the config's (bs, tokens) buckets.
func (c *Config) shapes() [][2]int {
	var out [][2]int
	for _, bs := range c.BatchSizes {
		if c.Batched != nil {
			out = append(out, [2]int{bs, c.TokensFor(bs)})
			continue
		}
		for _, n := range c.Packed.TokenLengths {
			out = append(out, [2]int{bs, n})
		}
	}
	return out
}

// dummyRows is the capture batch of a bucket: bs rows of padding handles
// whose token counts follow the config (zeros as token ids).
func (c *Config) dummyRows(ids []int64, tokens int) []Row {
	rows := make([]Row, len(ids))
	if c.Batched != nil {
		per := c.Batched.TokensPerRow
		for i, id := range ids {
			rows[i] = Row{ID: id, Tokens: make([]int32, per)}
		}
		return rows
	}
	var split []int
	if c.Packed.Rows != nil {
		split = c.Packed.Rows(len(ids), tokens)
	} else {
		split = make([]int, len(ids))
		split[0] = tokens
	}
	for i, id := range ids {
		n := 0
		if i < len(split) {
			n = split[i]
		}
		rows[i] = Row{ID: id, Tokens: make([]int32, n)}
	}
	return rows
}

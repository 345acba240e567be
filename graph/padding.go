package graph

import (
	"fmt"
	"sync"
)

// Unset is the handle that means "no row".
const Unset = -1

// handles is the process-wide registry of padding-row handles: each name
// gets one negative handle, counted down from -2, forever. A registry shared
// by every pool keeps two pools' rows apart as well.
var handles = struct {
	sync.Mutex
	byName map[string]int64
	names  map[int64]string
	next   int64
}{byName: map[string]int64{}, names: map[int64]string{}, next: -2}

// PaddingHandle is the stable handle of the padding row called name.
func PaddingHandle(name string) int64 {
	handles.Lock()
	defer handles.Unlock()
	if h, ok := handles.byName[name]; ok {
		return h
	}
	h := handles.next
	handles.next--
	handles.byName[name] = h
	handles.names[h] = name
	return h
}

// PaddingName is the name a padding handle was minted from (for logs).
func PaddingName(h int64) string {
	handles.Lock()
	defer handles.Unlock()
	if n, ok := handles.names[h]; ok {
		return n
	}
	return fmt.Sprintf("handle(%d)", h)
}

// IsPadding reports whether id is a padding row's handle.
func IsPadding(id int64) bool { return id < Unset }

// PaddingRows are the rows captured replays pad onto. Rows are ingested once
// and kept for the runner's life: re-ingesting would orphan the storage a
// capture left them. After capture their storage is released (ReleaseAll),
// since replays pad with zero-length rows that address only the sink.
type PaddingRows struct {
	prefix string
	node   Node

	mu       sync.Mutex
	ingested map[int64]bool
	order    []int64
}

// NewPaddingRows makes the pool of padding rows named prefix.
func NewPaddingRows(prefix string, node Node) *PaddingRows {
	return &PaddingRows{prefix: prefix, node: node, ingested: map[int64]bool{}}
}

// Handles are the bs handles for key: negative, stable per (prefix, key,
// index).
func (p *PaddingRows) Handles(key string, bs int) []int64 {
	ids := make([]int64, bs)
	for i := range ids {
		ids[i] = PaddingHandle(fmt.Sprintf("%s/%s/%d", p.prefix, key, i))
	}
	return ids
}

// Ensure returns bs rows for key, ingesting those not yet opened.
func (p *PaddingRows) Ensure(key string, bs int) ([]int64, error) {
	ids := p.Handles(key, bs)
	p.mu.Lock()
	defer p.mu.Unlock()
	var fresh []int64
	for _, id := range ids {
		if !p.ingested[id] {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) > 0 {
		if err := p.node.IngestPadding(fresh); err != nil {
			return nil, fmt.Errorf("graph: ingest padding rows %s: %w", key, err)
		}
		for _, id := range fresh {
			p.ingested[id] = true
			p.order = append(p.order, id)
		}
	}
	return ids, nil
}

// Reset returns rows to rest; free also releases their storage.
func (p *PaddingRows) Reset(ids []int64, free bool) error {
	if len(ids) == 0 {
		return nil
	}
	return p.node.ResetPadding(ids, free)
}

// ReleaseAll releases every row's storage (they stay ingested).
func (p *PaddingRows) ReleaseAll() error {
	p.mu.Lock()
	ids := append([]int64(nil), p.order...)
	p.mu.Unlock()
	return p.Reset(ids, true)
}

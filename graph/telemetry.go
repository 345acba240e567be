package graph

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// BucketStats is one bucket's telemetry. RealRows and PaddingRows count
// the rows its replays served and padded: batch rows for a whole step, the
// rows of its outputs (tokens, for a packed one) for a region.
type BucketStats struct {
	Bucket      string        `json:"bucket"`
	Replays     int64         `json:"replays"`
	PaddingRows int64         `json:"padding_rows"`
	RealRows    int64         `json:"real_rows"`
	ReplayTime  time.Duration `json:"replay_host_ns"`
}

// FallbackStats counts steps of a captured walk that ran eager, by reason.
type FallbackStats struct {
	Walk   string `json:"walk"`
	Reason string `json:"reason"`
	Steps  int64  `json:"steps"`
}

// Telemetry is what a runner reports for the engine and the server to
// publish.
type Telemetry struct {
	Buckets   []BucketStats   `json:"buckets"`
	Fallbacks []FallbackStats `json:"eager_fallbacks"`
	Dropped   []string        `json:"dropped"`
}

type telemetry struct {
	mu        sync.Mutex
	buckets   map[BucketKey]*BucketStats
	fallbacks map[[2]string]int64
}

func (t *telemetry) init() {
	t.buckets = map[BucketKey]*BucketStats{}
	t.fallbacks = map[[2]string]int64{}
}

func (t *telemetry) bucket(k BucketKey) *BucketStats {
	s := t.buckets[k]
	if s == nil {
		s = &BucketStats{Bucket: k.String()}
		t.buckets[k] = s
	}
	return s
}

func (t *telemetry) replay(k BucketKey, host time.Duration) {
	t.mu.Lock()
	s := t.bucket(k)
	s.Replays++
	s.ReplayTime += host
	t.mu.Unlock()
}

func (t *telemetry) release(k BucketKey, real, padding int) {
	t.mu.Lock()
	s := t.bucket(k)
	s.RealRows += int64(real)
	s.PaddingRows += int64(padding)
	t.mu.Unlock()
}

func (t *telemetry) fallback(walk, reason string) {
	t.mu.Lock()
	t.fallbacks[[2]string{walk, reason}]++
	t.mu.Unlock()
}

// NoteEager records that a step of walk ran eager for reason (the engine
// calls it when it had no lease for a walk the runner captures).
func (r *Runner) NoteEager(walk, reason string) { r.tele.fallback(walk, reason) }

// Telemetry is a snapshot of the runner's counters.
func (r *Runner) Telemetry() Telemetry {
	var out Telemetry
	r.tele.mu.Lock()
	for _, s := range r.tele.buckets {
		out.Buckets = append(out.Buckets, *s)
	}
	for k, n := range r.tele.fallbacks {
		out.Fallbacks = append(out.Fallbacks, FallbackStats{Walk: k[0], Reason: k[1], Steps: n})
	}
	r.tele.mu.Unlock()
	slices.SortFunc(out.Buckets, func(a, b BucketStats) int { return strings.Compare(a.Bucket, b.Bucket) })
	slices.SortFunc(out.Fallbacks, func(a, b FallbackStats) int {
		return strings.Compare(a.Walk+a.Reason, b.Walk+b.Reason)
	})
	for _, k := range r.droppedKeys() {
		out.Dropped = append(out.Dropped, k.String())
	}
	return out
}

package graph

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
)

// fakeNode is a synthetic model with a fake paged KV resource: embed the
// tokens, multiply by W, write the result into the KV cache at each token's
// slot, and emit the product and each row's argmax. Slot 0 of the cache is
// the sink. It records what the runner asked of it and can be told to fail.
type fakeNode struct {
	t      testing.TB
	dev    accel.Device
	s      accel.Stream
	d, v   int
	emb, w accel.Tensor
	cache  accel.Tensor // [nslots, d]
	double bool

	mu        sync.Mutex
	free      []int32           // free cache slots (0 is the sink, never free)
	reqs      map[int64][]int32 // request -> its slots
	padding   map[int64]bool    // ingested padding rows
	plan      map[SlotKey]accel.Tensor
	built     []SlotSpec          // every spec BuildGraphBuffers saw
	captures  []SlotSpec          // forwards run inside a capture, in order
	fail      map[SlotSpec]string // "error", "panic", "sync" or "diverge" at capture
	failWarm  map[SlotSpec]bool   // fail the warm-up instead
	blocked   []string
	extraRows bool // also give an input "rowinfo" [1, bs]
	// scratch, if set, is how many extra floats a bucket's forward holds at
	// once (shapes its peak and its graph's scratch).
	scratch func(BucketKey) int
	warmups map[specKey]int // eager forwards on a lease, per spec
	// stager, if set, makes Prepare stage the plan asynchronously on the
	// stream it is given, as a real resource does, instead of a synchronous
	// accel.Upload (which waits for everything on that stream).
	stager *accel.Stager
	// events is what the runner asked, in order: "build <spec>" when
	// BuildGraphBuffers first claims a spec's buffers, "warm <spec>" for an
	// eager forward on a capture lease, "capture <spec>" for a forward
	// inside a capture.
	events []string
	// padLen is each padding row's length: the positions its steps have
	// admitted since it was last at rest. Prepare advances it by the row's
	// tokens (as a real KV cache admits them); ResetPadding puts it back
	// to 0.
	padLen map[int64]int
	// stepStart is, per slot, where each padding row of the step last
	// prepared on it started. A forward on a capture lease (a warm-up or
	// the capture) of a step whose padding rows did not start at rest
	// fails, and is listed in offRest.
	stepStart map[SlotKey]map[int64]int
	offRest   []string
	// refuse makes Prepare on a capture lease for a spec (bucket and slot)
	// answer ErrNotAdmitted that many more times, as resources busy with
	// real requests do.
	refuse map[SlotSpec]int
	// onCapture, if set, is called (without the node's lock) from each
	// forward run inside a capture.
	onCapture func(SlotSpec)

	// blockedWalks, if it has the config's walk, is what Blocked answers
	// for it (else blocked): the resources of that walk's step that cannot
	// be captured.
	blockedWalks map[string][]string
}

const fakeSlots = 16384

func newFakeNode(t testing.TB, double bool) *fakeNode {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		dev.Close()
	})
	r := rand.New(rand.NewPCG(1, 1))
	n := &fakeNode{t: t, dev: dev, s: s, d: 16, v: 32, double: double,
		reqs: map[int64][]int32{}, padding: map[int64]bool{}, plan: map[SlotKey]accel.Tensor{},
		fail: map[SlotSpec]string{}, failWarm: map[SlotSpec]bool{}, warmups: map[specKey]int{},
		padLen: map[int64]int{}, stepStart: map[SlotKey]map[int64]int{}, refuse: map[SlotSpec]int{}}
	upload := func(v []float32, rows, cols int) accel.Tensor {
		x, err := accel.UploadF32(s, v, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	randn := func(k int, sd float64) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(r.NormFloat64() * sd)
		}
		return v
	}
	n.emb = upload(randn(n.v*n.d, 1), n.v, n.d)
	n.w = upload(randn(n.d*n.d, 0.3), n.d, n.d)
	n.cache = upload(make([]float32, fakeSlots*n.d), fakeSlots, n.d)
	for i := int32(fakeSlots - 1); i >= 1; i-- {
		n.free = append(n.free, i)
	}
	return n
}

func (n *fakeNode) DoubleBuffer() bool { return n.double }

func (n *fakeNode) Blocked(cfg *Config) []string {
	if b, ok := n.blockedWalks[cfg.Walk]; ok {
		return b
	}
	return n.blocked
}

func (n *fakeNode) BuildGraphBuffers(specs []SlotSpec) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, sp := range specs {
		k := SlotKey{Bucket: sp.Bucket, Slot: sp.Slot, Label: "kv"}
		if _, ok := n.plan[k]; ok {
			continue
		}
		b, err := n.dev.Alloc(int64(sp.Bucket.Tokens) * 4)
		if err != nil {
			return err
		}
		n.plan[k] = accel.Tensor{Buf: b, DType: accel.I32, Rows: 1, Cols: sp.Bucket.Tokens}
		n.built = append(n.built, sp)
		n.events = append(n.events, "build "+sp.String())
	}
	return nil
}

func (n *fakeNode) IngestPadding(ids []int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		if !IsPadding(id) {
			return fmt.Errorf("ingest padding: %d is a request id", id)
		}
		if n.padding[id] {
			return fmt.Errorf("padding row %d ingested twice", id)
		}
		n.padding[id] = true
	}
	return nil
}

func (n *fakeNode) ResetPadding(ids []int64, free bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		n.padLen[id] = 0
		if free {
			n.free = append(n.free, n.reqs[id]...)
			delete(n.reqs, id)
		}
	}
	return nil
}

// heldByPadding is the cache slots padding rows hold.
func (n *fakeNode) heldByPadding() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for id, s := range n.reqs {
		if IsPadding(id) {
			k += len(s)
		}
	}
	return k
}

// Prepare allocates one cache slot per new token (capture-time padding rows
// too; replay-time padding rows write into the sink), and plans the slot of
// every token of the bucket (the tail past the real tokens goes to the sink).
func (n *fakeNode) Prepare(s accel.Stream, lease *Lease, rows []Row) (Inputs, error) {
	n.mu.Lock()
	if lease != nil && lease.Capture {
		if k := (SlotSpec{Bucket: lease.Bucket, Slot: lease.Slot}); n.refuse[k] > 0 {
			n.refuse[k]--
			n.mu.Unlock()
			return nil, fmt.Errorf("fake kv busy with real requests: %w", ErrNotAdmitted)
		}
	}
	start := map[int64]int{}
	for _, r := range rows {
		if IsPadding(r.ID) {
			start[r.ID] = n.padLen[r.ID]
			n.padLen[r.ID] += len(r.Tokens)
		}
	}
	if lease != nil {
		n.stepStart[lease.SlotKey("")] = start
	}
	var toks, slots []int32
	for _, r := range rows {
		for range r.Tokens {
			if IsPadding(r.ID) && (lease == nil || !lease.Capture) {
				slots = append(slots, 0)
				continue
			}
			if IsPadding(r.ID) && !n.padding[r.ID] {
				n.mu.Unlock()
				return nil, fmt.Errorf("padding row %d was never ingested", r.ID)
			}
			if len(n.free) == 0 {
				n.mu.Unlock()
				return nil, errors.New("fake kv: out of slots")
			}
			sl := n.free[len(n.free)-1]
			n.free = n.free[:len(n.free)-1]
			n.reqs[r.ID] = append(n.reqs[r.ID], sl)
			slots = append(slots, sl)
		}
		toks = append(toks, r.Tokens...)
	}
	n.mu.Unlock()
	in := Inputs{"tokens": HostI32(toks)}
	if n.extraRows {
		in["rowinfo"] = HostI32(make([]int32, len(rows)))
	}
	if lease != nil {
		pt := n.plan[lease.SlotKey("kv")]
		full := make([]int32, lease.Bucket.Tokens)
		copy(full, slots)
		var err error
		if n.stager != nil {
			err = n.stager.Stage(s, pt.Buf, accel.I32Bytes(full))
		} else {
			err = accel.Upload(s, pt.Buf, accel.I32Bytes(full))
		}
		if err != nil {
			return nil, err
		}
	} else {
		in["slots"] = HostI32(slots)
	}
	return in, nil
}

func (n *fakeNode) Forward(l *accel.Launcher, lease *Lease, in map[string]accel.Tensor) (map[string]accel.Tensor, error) {
	toks := in["tokens"]
	T := toks.Cols
	slots := in["slots"]
	if lease != nil {
		pt := n.plan[lease.SlotKey("kv")]
		slots = accel.Tensor{Buf: pt.Buf.Slice(0, int64(T)*4), DType: accel.I32, Rows: 1, Cols: T}
	}
	capturing := l.Stream().Capturing()
	diverge := false
	if lease != nil && lease.Capture {
		spec := SlotSpec{Bucket: lease.Bucket, Slot: lease.Slot, Config: lease.cfg, ConfigIdx: lease.cfgIdx}
		key := SlotSpec{Bucket: lease.Bucket, Slot: lease.Slot}
		n.mu.Lock()
		var off []string
		for id, at := range n.stepStart[lease.SlotKey("")] {
			if at != 0 {
				off = append(off, fmt.Sprintf("padding row %d at position %d", id, at))
			}
		}
		slices.Sort(off)
		what := "warm"
		if capturing {
			what = "capture"
		}
		n.events = append(n.events, what+" "+key.String())
		if len(off) > 0 {
			n.offRest = append(n.offRest, fmt.Sprintf("%s %v: %v", what, key, off))
		}
		n.mu.Unlock()
		if len(off) > 0 {
			return nil, fmt.Errorf("%s of %v prepared with its padding rows off rest: %v", what, key, off)
		}
		if capturing {
			if n.onCapture != nil {
				n.onCapture(key)
			}
			n.mu.Lock()
			n.captures = append(n.captures, spec)
			mode := n.fail[key]
			n.mu.Unlock()
			switch mode {
			case "error":
				return nil, errors.New("injected capture failure")
			case "panic":
				panic("injected panic in a captured forward")
			case "sync":
				_ = l.Stream().Synchronize()
			case "diverge":
				// One extra kernel the eager forward does not run: the
				// graph's replay differs from eager.
				diverge = true
			}
		} else {
			n.mu.Lock()
			n.warmups[key.key()]++
			n.mu.Unlock()
			if n.failWarm[key] {
				return nil, errors.New("injected warm-up failure")
			}
		}
	}
	if n.scratch != nil && lease != nil {
		if extra := n.scratch(lease.Bucket); extra > 0 {
			tmp := l.Alloc(accel.F32, 1, extra)
			l.FillF32(tmp, 1)
			defer l.Free(tmp)
		}
	}
	x := l.Alloc(accel.F32, T, n.d)
	y := l.Alloc(accel.F32, T, n.d)
	next := l.Alloc(accel.I32, 1, T)
	l.Embed(x, n.emb, toks)
	l.MatMul(y, x, n.w)
	l.KVWrite(n.cache, n.cache, y, y, slots)
	l.Argmax(next, y)
	if diverge {
		l.FillF32(y, 0)
	}
	l.Free(x)
	return map[string]accel.Tensor{"y": y, "next": next}, l.Err()
}

// eager runs one eager step of rows and returns its outputs on the host.
func (n *fakeNode) eager(rows []Row) ([]float32, []int32) {
	n.t.Helper()
	in, err := n.Prepare(n.s, nil, rows)
	if err != nil {
		n.t.Fatal(err)
	}
	dev := map[string]accel.Tensor{}
	for name, h := range in {
		t, err := accel.UploadI32(n.s, accel.BytesI32(h.Data), h.Rows, h.Cols)
		if err != nil {
			n.t.Fatal(err)
		}
		dev[name] = t
	}
	l := accel.On(n.s)
	outs, err := n.Forward(l, nil, dev)
	if err != nil {
		n.t.Fatal(err)
	}
	y, err := accel.DownloadF32(n.s, outs["y"])
	if err != nil {
		n.t.Fatal(err)
	}
	next, err := accel.DownloadI32(n.s, outs["next"])
	if err != nil {
		n.t.Fatal(err)
	}
	l.Free(outs["y"], outs["next"])
	for _, t := range dev {
		n.dev.Free(t.Buf)
	}
	return y, next
}

// cache reads the whole KV cache.
func (n *fakeNode) readCache() []float32 {
	n.t.Helper()
	all, err := accel.DownloadF32(n.s, n.cache)
	if err != nil {
		n.t.Fatal(err)
	}
	return all
}

// cacheRows picks from a read cache the rows a request wrote.
func (n *fakeNode) cacheRows(all []float32, id int64) []float32 {
	var out []float32
	n.mu.Lock()
	for _, s := range n.reqs[id] {
		out = append(out, all[int(s)*n.d:(int(s)+1)*n.d]...)
	}
	n.mu.Unlock()
	return out
}

func decodeConfig() *Config {
	return &Config{Walk: "decode", Batched: &Batched{TokensPerRow: 1}, CapEagerBatch: true}
}

func sameBits(a, b []float32) bool {
	return slices.Equal(accel.F32Bytes(a), accel.F32Bytes(b))
}

// replayRows replays rows on the lease the way the engine does on the
// runner's stream: pad them to the bucket, prepare, run. It returns the
// outputs.
func replayRows(t *testing.T, r *Runner, n *fakeNode, l *Lease, rows []Row) map[string]accel.Tensor {
	t.Helper()
	padded, err := r.PadInputs(l, rows)
	if err != nil {
		t.Fatal(err)
	}
	in, err := n.Prepare(r.Stream(), l, padded)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := r.RunForward(l, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

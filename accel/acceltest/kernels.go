package acceltest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// The float64 references below are written from each Op's definition in
// package accel, independently of any backend.

func refMatMul(x []float32, w []float32, rows, in, out int) []float32 {
	y := make([]float32, rows*out)
	for t := 0; t < rows; t++ {
		for o := 0; o < out; o++ {
			var s float64
			for i := 0; i < in; i++ {
				s += float64(x[t*in+i]) * float64(w[o*in+i])
			}
			y[t*out+o] = float32(s)
		}
	}
	return y
}

func refRMSNorm(x, w []float32, rows, d int, eps float64) []float32 {
	out := make([]float32, rows*d)
	for t := 0; t < rows; t++ {
		var ss float64
		for j := 0; j < d; j++ {
			ss += float64(x[t*d+j]) * float64(x[t*d+j])
		}
		inv := 1 / math.Sqrt(ss/float64(d)+eps)
		for j := 0; j < d; j++ {
			out[t*d+j] = float32(float64(w[j]) * float64(x[t*d+j]) * inv)
		}
	}
	return out
}

func refRoPE(v []float32, pos []int32, cols, hd int, theta float64) []float32 {
	out := slices.Clone(v)
	for t := range pos {
		for h := 0; h < cols; h += hd {
			for i := 0; i < hd; i += 2 {
				ang := float64(pos[t]) * math.Pow(theta, -float64(i)/float64(hd))
				a, b := float64(v[t*cols+h+i]), float64(v[t*cols+h+i+1])
				out[t*cols+h+i] = float32(a*math.Cos(ang) - b*math.Sin(ang))
				out[t*cols+h+i+1] = float32(a*math.Sin(ang) + b*math.Cos(ang))
			}
		}
	}
	return out
}

type attnCase struct {
	h, kvh, hd, page int
	rows             []int32 // per token
	pos              []int32 // per token
	pages            []int32 // [R, P]
	ppr              int
	slots            int
}

func refAttention(c attnCase, q, kc, vc []float32) []float32 {
	T := len(c.rows)
	out := make([]float32, T*c.h*c.hd)
	kvd := c.kvh * c.hd
	for t := 0; t < T; t++ {
		r, n := int(c.rows[t]), int(c.pos[t])+1
		for h := 0; h < c.h; h++ {
			kh := h / (c.h / c.kvh)
			scores := make([]float64, n)
			m := math.Inf(-1)
			for p := 0; p < n; p++ {
				slot := int(c.pages[r*c.ppr+p/c.page])*c.page + p%c.page
				var s float64
				for i := 0; i < c.hd; i++ {
					s += float64(q[t*c.h*c.hd+h*c.hd+i]) * float64(kc[slot*kvd+kh*c.hd+i])
				}
				scores[p] = s / math.Sqrt(float64(c.hd))
				m = math.Max(m, scores[p])
			}
			var sum float64
			for p := range scores {
				scores[p] = math.Exp(scores[p] - m)
				sum += scores[p]
			}
			for i := 0; i < c.hd; i++ {
				var acc float64
				for p := 0; p < n; p++ {
					slot := int(c.pages[r*c.ppr+p/c.page])*c.page + p%c.page
					acc += scores[p] / sum * float64(vc[slot*kvd+kh*c.hd+i])
				}
				out[t*c.h*c.hd+h*c.hd+i] = float32(acc)
			}
		}
	}
	return out
}

func testKernels(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	r := rand.New(rand.NewPCG(7, 8))
	const tol = 2e-4

	t.Run("MatMul", func(t *testing.T) {
		for _, sh := range [][3]int{{1, 64, 64}, {3, 17, 33}, {8, 172, 64}, {64, 64, 172}, {5, 256, 512}} {
			rows, in, out := sh[0], sh[1], sh[2]
			xv, wv := Rand(r, rows*in, 1), Rand(r, out*in, 0.1)
			x, w, y := e.F32(xv, rows, in), e.F32(wv, out, in), e.Zeros(accel.F32, rows, out)
			accel.On(e.S).MatMul(y, x, w)
			if err := Close(e.ReadF32(y), refMatMul(xv, wv, rows, in, out), tol); err != nil {
				t.Errorf("%v: %v", sh, err)
			}
			// Row by row gives the same bits: a row's result never depends
			// on the batch it came in.
			for row := 0; row < rows; row++ {
				y1 := e.Zeros(accel.F32, 1, out)
				accel.On(e.S).MatMul(y1, x.RowSlice(row, row+1), w)
				if err := Same(e.Dev, e.ReadF32(y1), e.ReadF32(y.RowSlice(row, row+1)), tol); err != nil {
					t.Errorf("%v row %d alone: %v", sh, row, err)
				}
			}
		}
	})

	t.Run("MatMulBF16", func(t *testing.T) {
		rows, in, out := 3, 40, 24
		xv := Rand(r, rows*in, 1)
		bits, wv := BF16Bits(Rand(r, out*in, 0.1))
		buf, err := e.Dev.Alloc(int64(len(bits)))
		if err != nil {
			t.Fatal(err)
		}
		if err := accel.Upload(e.S, buf, bits); err != nil {
			t.Fatal(err)
		}
		w := accel.Tensor{Buf: buf, DType: accel.BF16, Rows: out, Cols: in}
		x, y := e.F32(xv, rows, in), e.Zeros(accel.F32, rows, out)
		accel.On(e.S).MatMul(y, x, w)
		if err := Close(e.ReadF32(y), refMatMul(xv, wv, rows, in, out), tol); err != nil {
			t.Error(err)
		}
	})

	t.Run("RMSNorm", func(t *testing.T) {
		rows, d := 5, 64
		xv, wv := Rand(r, rows*d, 2), Rand(r, d, 1)
		x, w, out := e.F32(xv, rows, d), e.F32(wv, 1, d), e.Zeros(accel.F32, rows, d)
		accel.On(e.S).RMSNorm(out, x, w, 1e-5)
		if err := Close(e.ReadF32(out), refRMSNorm(xv, wv, rows, d, 1e-5), tol); err != nil {
			t.Error(err)
		}
		// In place.
		accel.On(e.S).RMSNorm(x, x, w, 1e-5)
		if err := Close(e.ReadF32(x), refRMSNorm(xv, wv, rows, d, 1e-5), tol); err != nil {
			t.Errorf("in place: %v", err)
		}
	})

	t.Run("RoPE", func(t *testing.T) {
		rows, hd := 6, 8
		qv, kv := Rand(r, rows*4*hd, 1), Rand(r, rows*2*hd, 1)
		pos := []int32{0, 1, 7, 100, 511, 3}
		q, k, p := e.F32(qv, rows, 4*hd), e.F32(kv, rows, 2*hd), e.I32(pos, 1, rows)
		accel.On(e.S).RoPE(q, k, p, hd, 10000)
		if err := Close(e.ReadF32(q), refRoPE(qv, pos, 4*hd, hd, 10000), 1e-3); err != nil {
			t.Errorf("q: %v", err)
		}
		if err := Close(e.ReadF32(k), refRoPE(kv, pos, 2*hd, hd, 10000), 1e-3); err != nil {
			t.Errorf("k: %v", err)
		}
	})

	t.Run("EmbedGatherFill", func(t *testing.T) {
		v, d := 10, 6
		tab := Rand(r, v*d, 1)
		ids := []int32{3, 0, 9, -1, 10, 3}
		table, idt := e.F32(tab, v, d), e.I32(ids, 1, len(ids))
		out := e.Zeros(accel.F32, len(ids), d)
		accel.On(e.S).Embed(out, table, idt)
		got := e.ReadF32(out)
		for i, id := range ids {
			want := make([]float32, d)
			if id >= 0 && int(id) < v {
				copy(want, tab[int(id)*d:])
			}
			if err := Close(got[i*d:(i+1)*d], want, 0); err != nil {
				t.Errorf("embed id %d: %v", id, err)
			}
		}
		g := e.Zeros(accel.F32, 3, d)
		accel.On(e.S).GatherRows(g, table, e.I32([]int32{9, 42, 1}, 1, 3))
		got = e.ReadF32(g)
		if err := Close(got[:d], tab[9*d:10*d], 0); err != nil {
			t.Errorf("gather: %v", err)
		}
		if !AllZero(got[d : 2*d]) {
			t.Errorf("gather out of range: %v", got[d:2*d])
		}
		accel.On(e.S).FillF32(g, 2.5)
		if got := e.ReadF32(g); got[0] != 2.5 || got[len(got)-1] != 2.5 {
			t.Errorf("fill: %v", got)
		}
		ii := e.Zeros(accel.I32, 2, 3)
		accel.On(e.S).FillI32(ii, -7)
		if got := e.ReadI32(ii); got[0] != -7 || got[5] != -7 {
			t.Errorf("fill i32: %v", got)
		}
	})

	t.Run("Elementwise", func(t *testing.T) {
		n := 5000
		av, bv := Rand(r, n, 2), Rand(r, n, 2)
		a, b, out := e.F32(av, 1, n), e.F32(bv, 1, n), e.Zeros(accel.F32, 1, n)
		accel.On(e.S).SiLUMul(out, a, b)
		want := make([]float32, n)
		for i := range want {
			x := float64(av[i])
			want[i] = float32(x / (1 + math.Exp(-x)) * float64(bv[i]))
		}
		if err := Close(e.ReadF32(out), want, tol); err != nil {
			t.Errorf("silu_mul: %v", err)
		}
		accel.On(e.S).Add(a, a, b)
		for i := range want {
			want[i] = av[i] + bv[i]
		}
		if err := Close(e.ReadF32(a), want, 0); err != nil {
			t.Errorf("add in place: %v", err)
		}
	})

	t.Run("KVWriteAttention", func(t *testing.T) {
		c := attnCase{h: 4, kvh: 2, hd: 8, page: 4, ppr: 4}
		c.slots = 8 * c.page
		// Row 0: a prefill of 6 tokens (positions 0..5) on pages 3, 1;
		// row 1: one decode token at position 9 on pages 2, 5, 6;
		// row 2: a padding row on the sink page 0 at position 0.
		c.pages = []int32{3, 1, 0, 0, 2, 5, 6, 0, 0, 0, 0, 0}
		c.rows = []int32{0, 0, 0, 0, 0, 0, 1, 2}
		c.pos = []int32{0, 1, 2, 3, 4, 5, 9, 0}
		kvd := c.kvh * c.hd
		kcv, vcv := Rand(r, c.slots*kvd, 1), Rand(r, c.slots*kvd, 1)
		T := len(c.rows)
		kv, vv := Rand(r, T*kvd, 1), Rand(r, T*kvd, 1)
		slots := make([]int32, T)
		for t := range slots {
			row, p := int(c.rows[t]), int(c.pos[t])
			slots[t] = c.pages[row*c.ppr+p/c.page]*int32(c.page) + int32(p%c.page)
		}
		kc, vc := e.F32(kcv, c.slots, kvd), e.F32(vcv, c.slots, kvd)
		accel.On(e.S).KVWrite(kc, vc, e.F32(kv, T, kvd), e.F32(vv, T, kvd), e.I32(slots, 1, T))
		for t, s := range slots {
			copy(kcv[int(s)*kvd:], kv[t*kvd:(t+1)*kvd])
			copy(vcv[int(s)*kvd:], vv[t*kvd:(t+1)*kvd])
		}
		if err := Close(e.ReadF32(kc), kcv, 0); err != nil {
			t.Fatalf("kv_write k: %v", err)
		}
		if err := Close(e.ReadF32(vc), vcv, 0); err != nil {
			t.Fatalf("kv_write v: %v", err)
		}
		qv := Rand(r, T*c.h*c.hd, 1)
		q, out := e.F32(qv, T, c.h*c.hd), e.Zeros(accel.F32, T, c.h*c.hd)
		sh := accel.AttentionShape{Heads: c.h, KVHeads: c.kvh, HeadSize: c.hd, PageSize: c.page}
		pages := e.I32(c.pages, 3, c.ppr)
		accel.On(e.S).Attention(out, q, kc, vc, e.I32(c.rows, 1, T), e.I32(c.pos, 1, T), pages, sh)
		got := e.ReadF32(out)
		if err := Close(got, refAttention(c, qv, kcv, vcv), tol); err != nil {
			t.Errorf("attention: %v", err)
		}
		// The decode token alone gives the same bits as in the batch.
		one := e.Zeros(accel.F32, 1, c.h*c.hd)
		accel.On(e.S).Attention(one, q.RowSlice(6, 7), kc, vc, e.I32([]int32{1}, 1, 1), e.I32([]int32{9}, 1, 1), pages, sh)
		if err := Same(e.Dev, e.ReadF32(one), got[6*c.h*c.hd:7*c.h*c.hd], tol); err != nil {
			t.Errorf("decode row alone: %v", err)
		}
		// Out-of-range rows and positions give zeros, not faults.
		bad := e.Zeros(accel.F32, 2, c.h*c.hd)
		accel.On(e.S).Attention(bad, q.RowSlice(0, 2), kc, vc, e.I32([]int32{7, 0}, 1, 2), e.I32([]int32{0, 1000}, 1, 2), pages, sh)
		if got := e.ReadF32(bad); !AllZero(got) {
			t.Errorf("out-of-range tokens: %v", got[:4])
		}
	})

	t.Run("ArgmaxSample", func(t *testing.T) {
		R, V := 4, 50
		lv := Rand(r, R*V, 3)
		lv[1*V+7], lv[1*V+8] = 100, 100 // a tie: the first wins
		for i := 3 * V; i < 4*V; i++ {
			lv[i] /= 6 // a flatter row to sample from
		}
		logits := e.F32(lv, R, V)
		out := e.Zeros(accel.I32, 1, R)
		accel.On(e.S).Argmax(out, logits)
		got := e.ReadI32(out)
		for row := 0; row < R; row++ {
			want := 0
			for i := 1; i < V; i++ {
				if lv[row*V+i] > lv[row*V+want] {
					want = i
				}
			}
			if int(got[row]) != want {
				t.Errorf("argmax row %d: %d, want %d", row, got[row], want)
			}
		}
		// Temperature 0 is the argmax; the same (seed, offset) draws the
		// same token; top-k 1 is the argmax whatever the temperature; the
		// empirical distribution follows the softmax.
		p := accel.SampleParams{
			Temperature: e.F32([]float32{0, 1, 1, 0.7}, 1, R),
			TopK:        e.I32([]int32{0, 0, 1, 5}, 1, R),
			TopP:        e.F32([]float32{1, 1, 1, 0.9}, 1, R),
			Seed:        e.I32([]int32{1, 0, 2, 0, 3, 0, 4, 0}, R, 2),
			Offset:      e.I32([]int32{0, 0, 0, 0}, 1, R),
		}
		accel.On(e.S).Sample(out, logits, p)
		s1 := e.ReadI32(out)
		accel.On(e.S).Sample(out, logits, p)
		s2 := e.ReadI32(out)
		if !slices.Equal(s1, s2) {
			t.Errorf("same seed and offset drew %v then %v", s1, s2)
		}
		if s1[0] != got[0] || s1[2] != got[2] {
			t.Errorf("temperature 0 / top-k 1 drew %v, argmax %v", s1, got)
		}
		// Row 3 (top-k 5, top-p 0.9) only draws among its 5 largest.
		top := make([]int, V)
		for i := range top {
			top[i] = i
		}
		slices.SortFunc(top, func(a, b int) int {
			if lv[3*V+a] > lv[3*V+b] {
				return -1
			}
			if lv[3*V+a] < lv[3*V+b] {
				return 1
			}
			return a - b
		})
		counts := map[int32]int{}
		const draws = 400
		offs := make([]int32, R)
		for i := 0; i < draws; i++ {
			for j := range offs {
				offs[j] = int32(i)
			}
			e.WriteI32(p.Offset, offs)
			accel.On(e.S).Sample(out, logits, p)
			s := e.ReadI32(out)
			counts[s[3]]++
		}
		for tok := range counts {
			if !slices.Contains(top[:5], int(tok)) {
				t.Errorf("top-k 5 drew token %d outside the top 5 %v", tok, top[:5])
			}
		}
		if len(counts) < 2 {
			t.Errorf("400 draws at temperature 0.7 gave one token: %v", counts)
		}
	})

	t.Run("LogProbs", func(t *testing.T) {
		// A row of ties (ordered by token), a spread row, a row with one
		// large logit, and a token outside the vocabulary; a small
		// vocabulary and one past 1024 (the CPU kernels keep their marks
		// elsewhere there).
		for _, V := range []int{300, 3000} {
			R, K := 4, 20
			lv := Rand(r, R*V, 4)
			for i := 0; i < V; i++ {
				lv[i] = float32(i % 7)
			}
			lv[2*V+123] = 60
			toks := []int32{5, int32(V - 1), 123, int32(V)}
			vals, ids := e.Zeros(accel.F32, R, K+1), e.Zeros(accel.I32, R, K)
			accel.On(e.S).LogProbs(vals, ids, e.F32(lv, R, V), e.I32(toks, 1, R), K)
			gv, gi := e.ReadF32(vals), e.ReadI32(ids)
			for row := 0; row < R; row++ {
				x := lv[row*V : (row+1)*V]
				m := slices.Max(x)
				sum := 0.0
				for _, v := range x {
					sum += math.Exp(float64(v - m))
				}
				lp := func(i int) float64 { return float64(x[i]-m) - math.Log(sum) }
				order := make([]int, V)
				for i := range order {
					order[i] = i
				}
				slices.SortStableFunc(order, func(a, b int) int {
					switch {
					case x[a] > x[b]:
						return -1
					case x[a] < x[b]:
						return 1
					}
					return 0
				})
				want0 := math.Inf(-1)
				if toks[row] < int32(V) {
					want0 = lp(int(toks[row]))
				}
				if got := float64(gv[row*(K+1)]); !(got == want0 || math.Abs(got-want0) <= 1e-5*max(1, math.Abs(want0))) {
					t.Errorf("row %d: token %d lp %v, want %v", row, toks[row], got, want0)
				}
				for j := 0; j < K; j++ {
					if int(gi[row*K+j]) != order[j] {
						t.Fatalf("row %d: top %d is token %d, want %d (%v)", row, j, gi[row*K+j], order[j], gi[row*K:(row+1)*K])
					}
					if got, want := float64(gv[row*(K+1)+1+j]), lp(order[j]); math.Abs(got-want) > 1e-5*max(1, math.Abs(want)) {
						t.Errorf("row %d: top %d lp %v, want %v", row, j, got, want)
					}
				}
			}
		}
	})
}

// WriteI32 overwrites an I32 tensor's contents.
func (e *Env) WriteI32(t accel.Tensor, v []int32) {
	e.T.Helper()
	if err := accel.Upload(e.S, t.Buf.Slice(0, t.Bytes()), accel.I32Bytes(v)); err != nil {
		e.T.Fatalf("upload: %v", err)
	}
}

//go:build goexperiment.simd && amd64

package cpu

import "unsafe"

// The AVX-512 set's attention of a decode step: one token per sequence,
// each reading its own sequence's keys and values, for heads of a multiple
// of sixteen. Against the general per-token path (scoresHead, softmaxRows,
// avHead, which it keeps for the softmax and for heads of other widths'
// weighted sums):
//   - scores: sixteen positions per chain, not eight, the block's keys
//     transposed in registers by a Go assembly kernel (scoresDec16), with
//     no per-head broadcast copy of q; rows padded to whole blocks of
//     sixteen with copies of the last position;
//   - weighted sums: two heads side by side (eight chains, vAVDec2x64)
//     where one head's four waited on the add's latency;
//   - the next head's rows asked for (prefetchOffs) while a head computes:
//     the caches lose a layer's keys and values to the weights between
//     two layers' attention, and a head's few hundred bytes of each of its
//     positions, scattered over the sequence's pages, are too little of a
//     pattern for the hardware prefetchers (BenchmarkAttentionBatch64:
//     "cold" twice "hot" at ctx12 on the general path). Asking for the
//     whole next token's rows instead, a token ahead, measured no faster
//     (ctx12 cold, ~695 against ~630 cpu-ns per item, load ~7): its
//     ~600 lines' requests queue behind each other.
// Each score, softmax and weighted sum is the general path's chain, in its
// order: the bits are its bits (TestAttnDecMatchesGeneral).

// prefetchOffs asks for lines cache lines from base+4*offs[i] for each i
// < n (attn_dec512_amd64.s).
//
//go:noescape
func prefetchOffs(base unsafe.Pointer, offs *int, n int, lines int)

// rowLines is how many cache lines a row piece of bytes bytes covers at
// most, wherever it starts.
func rowLines(bytes int) int { return (bytes+63)/64 + 1 }

// attnDec512 is runAttention's work for one token (orow, qrow its output
// and query rows, offs its n positions' cache rows, maxOff the largest)
// and heads [h0, h1) where heads are a multiple of sixteen, on the AVX-512
// set (false, nothing written, for other heads).
//
//go:norace
func attnDec512(orow, qrow, kc, vc []float32, offs []int, maxOff, n, h0, h1, group, hd int, scale float32, k *kctx, vk *vecOps) bool {
	if hd%16 != 0 || len(kc) == 0 || len(vc) == 0 {
		return false
	}
	kvd := len(qrow) / group // the floats of a position: nh/group heads of hd
	if maxOff+kvd > len(kc) || maxOff+kvd > len(vc) {
		panic("cpu: attention: a cache row out of range")
	}
	return attnDec512In(orow, qrow, decCache{k: unsafe.Pointer(&kc[0]), v: unsafe.Pointer(&vc[0]), kc: kc, vc: vc},
		offs, maxOff, n, h0, h1, group, hd, scale, k, vk)
}

// attnDec512Half is attnDec512 over F16 caches, their rows widened as the
// kernels load them (scoresDec16h, vAVDec2x64h): for heads of 64 in pairs
// and of multiples of 128 (false, nothing written, for others, which
// widen into scratch instead).
//
//go:norace
func attnDec512Half(orow, qrow []float32, kh, vh []uint16, offs []int, maxOff, n, h0, h1, group, hd int, scale float32, k *kctx, vk *vecOps) bool {
	if hd%16 != 0 || len(kh) == 0 || len(vh) == 0 || !(hd == 64 && (h1-h0)%2 == 0 || hd%128 == 0) {
		return false
	}
	kvd := len(qrow) / group
	if maxOff+kvd > len(kh) || maxOff+kvd > len(vh) {
		panic("cpu: attention: a cache row out of range")
	}
	return attnDec512In(orow, qrow, decCache{k: unsafe.Pointer(&kh[0]), v: unsafe.Pointer(&vh[0]), half: true},
		offs, maxOff, n, h0, h1, group, hd, scale, k, vk)
}

// decCache is the KV cache attnDec512In reads: its bases, and the float32
// slices (for avHead) or half set for binary16 elements.
type decCache struct {
	k, v   unsafe.Pointer
	kc, vc []float32
	half   bool
}

// at is element e of base b.
func (c decCache) at(b unsafe.Pointer, e int) unsafe.Pointer {
	if c.half {
		return unsafe.Add(b, 2*e)
	}
	return unsafe.Add(b, 4*e)
}

func (c decCache) prefetch(b unsafe.Pointer, e int, offs []int, n, hd int) {
	if c.half {
		prefetchRows2(c.at(b, e), &offs[0], n, rowLines(hd*2))
		return
	}
	prefetchOffs(c.at(b, e), &offs[0], n, rowLines(hd*4))
}

//go:norace
func attnDec512In(orow, qrow []float32, kv decCache, offs []int, maxOff, n, h0, h1, group, hd int, scale float32, k *kctx, vk *vecOps) bool {
	nhp := h1 - h0
	// Each head's row of scores padded to whole blocks of sixteen with
	// copies of the last position: the pad leaves the maximum as it is,
	// and the sums and the weighted values stop at n (as the general
	// path's pad to eight).
	ns := (n + 15) &^ 15
	offs = padOffs(k, n, ns)
	if cap(k.att) < nhp*ns {
		k.att = make([]float32, 0, max(nhp*ns, 1024))
	}
	S := k.att[:nhp*ns]
	for h := h0; h < h1; h++ {
		koff := (h / group) * hd
		if h+1 < h1 && (h+1)/group != h/group {
			kv.prefetch(kv.k, koff+hd, offs, n, hd)
		}
		qh := qrow[h*hd : (h+1)*hd]
		if kv.half {
			scoresDec16h(unsafe.Pointer(&S[(h-h0)*ns]), kv.at(kv.k, koff), &offs[0], ns/16, unsafe.Pointer(&qh[0]), hd, scale)
		} else {
			scoresDec16(unsafe.Pointer(&S[(h-h0)*ns]), kv.at(kv.k, koff), &offs[0], ns/16, unsafe.Pointer(&qh[0]), hd, scale)
		}
	}
	kv.prefetch(kv.v, (h0/group)*hd, offs, n, hd)
	softmaxRowsPad(S, nhp, n, ns, vk, k)
	av := vAVDec2x64
	if kv.half {
		av = func(d0, d1, v0, v1 unsafe.Pointer, offs []int, a0, a1 unsafe.Pointer) {
			if len(offs) > 0 {
				vAVDec2x64h(d0, d1, v0, v1, &offs[0], len(offs), a0, a1)
			}
		}
	}
	for h := h0; h < h1; {
		koff := (h / group) * hd
		// This step's heads: two side by side where they are 64 wide.
		step := 1
		if hd == 64 && h+1 < h1 {
			step = 2
		}
		// Ask for the next step's value rows of the KV heads this step
		// does not read.
		last := (h + step - 1) / group
		for g := last + 1; g <= (min(h+2*step, h1)-1)/group; g++ {
			kv.prefetch(kv.v, g*hd, offs, n, hd)
		}
		a0 := unsafe.Pointer(&S[(h-h0)*ns])
		switch {
		case step == 2:
			av(unsafe.Pointer(&orow[h*64]), unsafe.Pointer(&orow[(h+1)*64]),
				kv.at(kv.v, koff), kv.at(kv.v, ((h+1)/group)*64), offs[:n], a0, unsafe.Pointer(&S[(h+1-h0)*ns]))
		case hd%128 == 0:
			// A head's halves of each 128 side by side.
			for c := 0; c < hd; c += 128 {
				av(unsafe.Pointer(&orow[h*hd+c]), unsafe.Pointer(&orow[h*hd+c+64]),
					kv.at(kv.v, koff+c), kv.at(kv.v, koff+c+64), offs[:n], a0, a0)
			}
		default:
			avHead(orow[h*hd:(h+1)*hd], kv.vc[koff:], offs[:n], maxOff, S[(h-h0)*ns:(h-h0)*ns+n], vk)
		}
		h += step
	}
	return true
}

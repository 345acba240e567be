//go:build goexperiment.simd && amd64

package cpu

import "unsafe"

// The AVX-512 set's attention of a decode step: one token per sequence,
// each reading its own sequence's keys and values, for heads of a multiple
// of sixteen. Against the general per-token path (scoresHead, softmaxRows,
// avHead, which it keeps for the softmax):
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

// attnDec512 is runAttention for heads of a multiple of sixteen on the
// AVX-512 set (false, nothing written, for other heads).
//
//go:norace
func attnDec512(c *rcall, lo, hi int, k *kctx, vk *vecOps) bool {
	out, q, kc, vc := c.o[0].f32(), c.o[1].f32(), c.o[2].f32(), c.o[3].f32()
	rows, pages := c.o[4].i32(), c.o[6].i32()
	nh, nkv, hd, page := c.i[0], c.i[1], c.i[2], c.i[3]
	if hd == 0 || hd%16 != 0 || nkv == 0 || nh%nkv != 0 || len(kc) == 0 || len(vc) == 0 {
		return false
	}
	ppr := c.o[6].cols
	kvd := nkv * hd
	group := nh / nkv
	T := c.o[1].rows
	scale := sqrt32(float32(hd))
	for t := 0; t < T; t++ {
		h0, h1 := headRange(lo, hi, t, T)
		if h0 >= h1 {
			continue
		}
		orow := out[t*nh*hd : (t+1)*nh*hd]
		clearF32(orow[h0*hd : h1*hd])
		n, ok := attnValid(c, t)
		if !ok {
			continue
		}
		nhp := h1 - h0
		r := int(rows[t])
		offs, maxOff := cacheOffs(k, pages[r*ppr:(r+1)*ppr], n, page, kvd)
		if maxOff+kvd > len(kc) || maxOff+kvd > len(vc) {
			panic("cpu: attention: a cache row out of range")
		}
		// Each head's row of scores padded to whole blocks of sixteen with
		// copies of the last position: the pad leaves the maximum as it is,
		// and the sums and the weighted values stop at n (as the general
		// path's pad to eight).
		ns := (n + 15) &^ 15
		if cap(k.offs) < ns {
			k.offs = append(k.offs[:n], make([]int, ns-n)...)
		}
		offs = k.offs[:ns]
		for p := n; p < ns; p++ {
			offs[p] = offs[n-1]
		}
		if cap(k.att) < nhp*ns {
			k.att = make([]float32, 0, max(nhp*ns, 1024))
		}
		S := k.att[:nhp*ns]
		lines := rowLines(hd * 4)
		for h := h0; h < h1; h++ {
			koff := (h / group) * hd
			if h+1 < h1 && (h+1)/group != h/group {
				prefetchOffs(unsafe.Pointer(&kc[koff+hd]), &offs[0], n, lines)
			}
			qh := q[t*nh*hd+h*hd : t*nh*hd+(h+1)*hd]
			scoresDec16(unsafe.Pointer(&S[(h-h0)*ns]), unsafe.Pointer(&kc[koff]), &offs[0], ns/16, unsafe.Pointer(&qh[0]), hd, scale)
		}
		prefetchOffs(unsafe.Pointer(&vc[(h0/group)*hd]), &offs[0], n, lines)
		softmaxRowsPad(S, nhp, n, ns, vk, k)
		for h := h0; h < h1; {
			koff := (h / group) * hd
			if h+1 < h1 && (h+1)/group != h/group {
				prefetchOffs(unsafe.Pointer(&vc[koff+hd]), &offs[0], n, lines)
			}
			a0 := unsafe.Pointer(&S[(h-h0)*ns])
			switch {
			case hd == 64 && h+1 < h1:
				// Two heads side by side.
				vAVDec2x64(unsafe.Pointer(&orow[h*64]), unsafe.Pointer(&orow[(h+1)*64]),
					unsafe.Pointer(&vc[koff]), unsafe.Pointer(&vc[((h+1)/group)*64]), offs[:n], a0, unsafe.Pointer(&S[(h+1-h0)*ns]))
				h += 2
				continue
			case hd%128 == 0:
				// A head's halves of each 128 side by side.
				for c := 0; c < hd; c += 128 {
					vAVDec2x64(unsafe.Pointer(&orow[h*hd+c]), unsafe.Pointer(&orow[h*hd+c+64]),
						unsafe.Pointer(&vc[koff+c]), unsafe.Pointer(&vc[koff+c+64]), offs[:n], a0, a0)
				}
			default:
				avHead(orow[h*hd:(h+1)*hd], vc[koff:], offs[:n], maxOff, S[(h-h0)*ns:(h-h0)*ns+n], vk)
			}
			h++
		}
	}
	return true
}

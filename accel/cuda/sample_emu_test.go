package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel/acceltest"
)

// This file emulates k_sample's block-parallel algorithm in Go, thread by
// thread (contiguous chunks, block reductions, bisection over order keys,
// first_cross's scan-and-walk), and checks it against OpSample's definition:
// the argmax at temperature <= 0, the index-order draw without top-k/top-p,
// and, with them, a draw inside the top-k / top-p candidate set. It checks
// the decomposition's logic, not the CUDA (which TestKernelsCompileWithNVRTC
// and the device tests cover).

const emuThreads = 256

func ordkeyGo(x float32) uint32 {
	u := math.Float32bits(x)
	if u&0x80000000 != 0 {
		return ^u
	}
	return u | 0x80000000
}

type emuRow struct {
	row          []float32
	t, m, sum    float32
	useK, useP   bool
	kt, pt       uint32
	klast, plast int
}

func (s *emuRow) prob(i int) float32 {
	return float32(math.Exp(float64(s.row[i]/s.t-s.m))) / s.sum
}

func (s *emuRow) inK(i int, key uint32) bool {
	return !s.useK || key > s.kt || (key == s.kt && i <= s.klast)
}

func (s *emuRow) inSet(i int, key uint32) bool {
	return s.inK(i, key) && (!s.useP || key > s.pt || (key == s.pt && i <= s.plast))
}

func chunks(v int) [][2]int {
	c := (v + emuThreads - 1) / emuThreads
	out := make([][2]int, emuThreads)
	for tid := range out {
		c0 := min(v, tid*c)
		out[tid] = [2]int{c0, min(v, c0+c)}
	}
	return out
}

// firstCross emulates kernels.cu's first_cross.
func firstCross(v int, f func(i int) (float32, bool), base, target float32, strict bool) int {
	ch := chunks(v)
	scan := make([]float32, emuThreads)
	for tid, c := range ch {
		var loc float32
		for i := c[0]; i < c[1]; i++ {
			if w, ok := f(i); ok {
				loc += w
			}
		}
		scan[tid] = loc
	}
	s := base
	for j := range scan {
		l := scan[j]
		scan[j] = s
		s += l
	}
	found := math.MaxInt32
	for tid, c := range ch {
		cdf := scan[tid]
		for i := c[0]; i < c[1]; i++ {
			w, ok := f(i)
			if !ok {
				continue
			}
			cdf += w
			if (strict && target < cdf) || (!strict && cdf >= target) {
				found = min(found, i)
				break
			}
		}
	}
	return found
}

func blockSum(v int, f func(i int) float32) float32 {
	var total float32
	for _, c := range chunks(v) {
		var loc float32
		for i := c[0]; i < c[1]; i++ {
			loc += f(i)
		}
		total += loc
	}
	return total
}

func blockCount(v int, f func(i int) bool) int {
	n := 0
	for i := 0; i < v; i++ {
		if f(i) {
			n++
		}
	}
	return n
}

func argmaxGo(row []float32) int {
	best := 0
	for i, x := range row {
		if x > row[best] {
			best = i
		}
	}
	return best
}

// emuSample is k_sample for one row.
func emuSample(row []float32, t float32, k int, pp float32, u float32) int {
	v := len(row)
	if !(t > 0) {
		return argmaxGo(row)
	}
	s := &emuRow{row: row, t: t}
	s.m = float32(math.Inf(-1))
	for _, x := range row {
		s.m = max(s.m, x/t)
	}
	s.sum = blockSum(v, func(i int) float32 { return float32(math.Exp(float64(row[i]/t - s.m))) })
	s.useK = k > 0 && k < v
	s.useP = pp > 0 && pp < 1
	s.klast, s.plast = v-1, v-1
	if s.useK {
		lo, hi := uint64(0), uint64(0xFFFFFFFF)
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if blockCount(v, func(i int) bool { return uint64(ordkeyGo(row[i])) >= mid }) >= k {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		s.kt = uint32(lo)
		gt := blockCount(v, func(i int) bool { return ordkeyGo(row[i]) > s.kt })
		last := firstCross(v, func(i int) (float32, bool) { return 1, ordkeyGo(row[i]) == s.kt }, 0, float32(k-gt), false)
		if last == math.MaxInt32 {
			last = v - 1
		}
		s.klast = last
	}
	if s.useP {
		all := blockSum(v, func(i int) float32 {
			if s.inK(i, ordkeyGo(row[i])) {
				return s.prob(i)
			}
			return 0
		})
		if all >= pp {
			lo, hi := uint64(0), uint64(0xFFFFFFFF)
			for lo < hi {
				mid := lo + (hi-lo+1)/2
				mass := blockSum(v, func(i int) float32 {
					key := ordkeyGo(row[i])
					if s.inK(i, key) && uint64(key) >= mid {
						return s.prob(i)
					}
					return 0
				})
				if mass >= pp {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			s.pt = uint32(lo)
			cum := blockSum(v, func(i int) float32 {
				key := ordkeyGo(row[i])
				if s.inK(i, key) && key > s.pt {
					return s.prob(i)
				}
				return 0
			})
			last := firstCross(v, func(i int) (float32, bool) {
				key := ordkeyGo(row[i])
				if key != s.pt || !s.inK(i, key) {
					return 0, false
				}
				return s.prob(i), true
			}, cum, pp, false)
			if last == math.MaxInt32 {
				last = v - 1
			}
			s.plast = last
		}
	}
	inSet := func(i int) (float32, bool) {
		if !s.inSet(i, ordkeyGo(row[i])) {
			return 0, false
		}
		return s.prob(i), true
	}
	total := blockSum(v, func(i int) float32 { w, _ := inSet(i); return w })
	lastIn := 0
	for i := range row {
		if _, ok := inSet(i); ok {
			lastIn = i
		}
	}
	rr := u
	if s.useK || s.useP {
		rr = u * total
	}
	pick := firstCross(v, inSet, 0, rr, true)
	if pick != math.MaxInt32 {
		return pick
	}
	if s.useK || s.useP {
		return lastIn
	}
	return v - 1
}

func TestSampleEmulation(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for trial := 0; trial < 200; trial++ {
		v := []int{1, 2, 7, 50, 255, 256, 257, 1000, 3000}[trial%9]
		if trial == 8 {
			v = 32000 // a real vocabulary, once
		}
		row := make([]float32, v)
		for i := range row {
			row[i] = float32(r.NormFloat64() * 3)
		}
		if v > 10 && trial%3 == 0 { // ties
			row[5] = row[2]
			row[9] = row[2]
		}
		temp := []float32{0, -1, 0.5, 1, 1.7}[trial%5]
		k := []int{0, 1, 5, v, v + 3, 40}[trial%6]
		pp := []float32{1, 0.9, 0.5, 0.01, 0}[trial%5]
		for d := 0; d < 5; d++ {
			u := float32(r.Float64())
			got := emuSample(row, temp, k, pp, u)
			if got < 0 || got >= v {
				t.Fatalf("v %d t %v k %d p %v: drew %d", v, temp, k, pp, got)
			}
			if !(temp > 0) {
				if got != argmaxGo(row) {
					t.Fatalf("temperature %v: drew %d, argmax %d", temp, got, argmaxGo(row))
				}
				continue
			}
			useK, useP := k > 0 && k < v, pp > 0 && pp < 1
			if !useK && !useP {
				// The index-order draw: cdf(got-1) <= u < cdf(got), in
				// exact arithmetic up to rounding.
				m := math.Inf(-1)
				for _, x := range row {
					m = math.Max(m, float64(x/temp))
				}
				var sum float64
				for _, x := range row {
					sum += math.Exp(float64(x/temp) - m)
				}
				var before float64
				for i := 0; i < got; i++ {
					before += math.Exp(float64(row[i]/temp)-m) / sum
				}
				after := before + math.Exp(float64(row[got]/temp)-m)/sum
				if float64(u) < before-1e-5 || (float64(u) >= after+1e-5 && got != v-1) {
					t.Fatalf("v %d: drew %d for u %v, its cdf interval [%v, %v)", v, got, u, before, after)
				}
				continue
			}
			set := acceltest.SampleCandidates(row, temp, k, pp)
			if _, in := set[got]; !in {
				t.Fatalf("v %d t %v k %d p %v: drew %d outside the candidate set (%d members)", v, temp, k, pp, got, len(set))
			}
			// The emulated set is the definition's set: every member is
			// drawn for some u.
			if trial%10 == 0 && v <= 300 {
				drawn := map[int]bool{}
				for j := 0; j < 4000; j++ {
					drawn[emuSample(row, temp, k, pp, float32(j)/4000)] = true
				}
				for i, p := range set {
					if !drawn[i] && p > 0.01 {
						t.Errorf("v %d t %v k %d p %v: candidate %d (p %.3g) never drawn", v, temp, k, pp, i, p)
					}
				}
				for i := range drawn {
					if _, in := set[i]; !in {
						t.Errorf("v %d t %v k %d p %v: drew %d outside the set", v, temp, k, pp, i)
					}
				}
			}
		}
	}
}

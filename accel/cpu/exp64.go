package cpu

import "math"

// Exponentials in float64, the bits of math.Exp, faster.
//
// The log probabilities sum math.Exp(x - max) in float64 over every token
// of the vocabulary of every row, and that sum is part of the result: a
// faster exponential must give math.Exp's bits. On amd64 math.Exp is an
// assembly routine (Shibata's method: x = k·ln2 + r, r/16 through a Taylor
// polynomial, squared back four times), with a fused multiply-add variant
// on CPUs with FMA; it is called through an ABI wrapper per element. The
// functions here are both variants written out in Go, operation for
// operation (every product converted explicitly, so the compiler fuses
// none that the assembly does not), for arguments in [-expFastRange,
// expFastRange] where no denormal or overflowing result arises; the others
// (and NaN) go to math.Exp.
//
// Which variant matches is not assumed: at start-up each is checked
// against math.Exp on probe arguments (exp64Probes) and the first that
// agrees on every bit is used; where none does (another architecture, or a
// Go release that changed the routine) math.Exp itself is. TestExp64Bits
// checks the choice on many more arguments.

// expFastRange bounds the arguments the Go variants take: k = round(x/ln2)
// stays within ±1010, so 2^k is a normal float64 and no result overflows.
const expFastRange = 700

const (
	expLog2E = 1.4426950408889634073599246810018920
	expLn2U  = 0.69314718055966295651160180568695068359375
	expLn2L  = 0.28235290563031577122588448175013436025525412068e-12
	// expRound added and subtracted rounds a float64 below 2^51 in
	// magnitude to the nearest integer, ties to even (CVTSD2SL's rounding).
	expRound = 0x1.8p52
	expC2    = 1.6666666666666666667e-1
	expC3    = 4.1666666666666666667e-2
	expC4    = 8.3333333333333333333e-3
	expC5    = 1.3888888888888888889e-3
	expC6    = 1.9841269841269841270e-4
	expC7    = 2.4801587301587301587e-5
)

// expFMA is math.Exp's FMA variant for |x| <= expFastRange.
func expFMA(x float64) float64 {
	kf := float64(float64(x*expLog2E)+expRound) - expRound
	r := math.FMA(-expLn2U, kf, x)
	r = math.FMA(-expLn2L, kf, r)
	r = float64(r * 0.0625)
	p := math.FMA(expC7, r, expC6)
	p = math.FMA(p, r, expC5)
	p = math.FMA(p, r, expC4)
	p = math.FMA(p, r, expC3)
	p = math.FMA(p, r, expC2)
	p = math.FMA(p, r, 0.5)
	p = math.FMA(p, r, 1)
	r = float64(r * p)
	r = float64(r * (r + 2))
	r = float64(r * (r + 2))
	r = float64(r * (r + 2))
	r = math.FMA(r, r+2, 1)
	return float64(r * math.Float64frombits(uint64(int64(kf)+0x3ff)<<52))
}

// expNoFMA is math.Exp's variant without FMA for |x| <= expFastRange.
func expNoFMA(x float64) float64 {
	kf := float64(float64(x*expLog2E)+expRound) - expRound
	r := x - float64(expLn2U*kf)
	r -= float64(expLn2L * kf)
	r = float64(r * 0.0625)
	p := float64(expC7*r) + expC6
	p = float64(p*r) + expC5
	p = float64(p*r) + expC4
	p = float64(p*r) + expC3
	p = float64(p*r) + expC2
	p = float64(p*r) + 0.5
	p = float64(p*r) + 1
	r = float64(r * p)
	r = float64(r * (r + 2))
	r = float64(r * (r + 2))
	r = float64(r * (r + 2))
	r = float64(r*(r+2)) + 1
	return float64(r * math.Float64frombits(uint64(int64(kf)+0x3ff)<<52))
}

// exp64Variant is the Go variant that gives math.Exp's bits here (0: none,
// use math.Exp; 1: expFMA; 2: expNoFMA); exp64VecOK says the vector
// exponential gives them too (it reproduces the FMA variant). Both are
// checked once, at init, on one set of probes.
var exp64Variant, exp64VecOK = pickExps()

func pickExps() (int, bool) {
	xs := exp64Probes()
	v := pickExp64(xs)
	return v, exp64VecBuilt && v == 1 && checkExp64Vec(xs)
}

// exp64Probes are arguments spread over the fast range, with the integers
// and half-integers of x/ln2 (where the rounding of k turns) and their
// neighbours.
func exp64Probes() []float64 {
	var xs []float64
	for i := -2000; i <= 2000; i++ {
		x := float64(i) * 0.35
		xs = append(xs, x, math.Nextafter(x, -1), float64(i)*0.5/expLog2E, float64(i)*0.001)
	}
	return xs
}

func pickExp64(xs []float64) int {
	for v, f := range []func(float64) float64{expFMA, expNoFMA} {
		ok := true
		for _, x := range xs {
			if math.Abs(x) <= expFastRange && math.Float64bits(f(x)) != math.Float64bits(math.Exp(x)) {
				ok = false
				break
			}
		}
		if ok {
			return v + 1
		}
	}
	return 0
}

func checkExp64Vec(xs []float64) bool {
	x := make([]float32, 0, len(xs))
	for _, v := range xs {
		if math.Abs(v) <= expFastRange {
			x = append(x, float32(v))
		}
	}
	out := make([]float64, len(x))
	n := expShift64Vec(out, x, 0)
	for i, v := range x[:n] {
		if math.Float64bits(out[i]) != math.Float64bits(math.Exp(float64(v))) {
			return false
		}
	}
	return n > 0
}

// sumExpShift is the sum, in element order, of math.Exp(float64(x[i] - m))
// in float64: the bits math.Exp's loop gives. The vector exponential
// computes a block's exponentials ahead of the (sequential) sum.
//
//go:norace
func sumExpShift(x []float32, m float32) float64 {
	sum := 0.0
	if exp64VecOK && len(x) >= 4 {
		var buf [256]float64
		for lo := 0; lo < len(x); lo += len(buf) {
			c := x[lo:min(lo+len(buf), len(x))]
			n := expShift64Vec(buf[:], c, m)
			for i, v := range c {
				a := float64(v - m)
				if i < n && a >= -expFastRange && a <= expFastRange {
					sum += buf[i]
				} else {
					sum += math.Exp(a)
				}
			}
		}
		return sum
	}
	variant := exp64Variant
	for _, v := range x {
		a := float64(v - m)
		switch {
		case variant == 0 || !(a >= -expFastRange && a <= expFastRange):
			sum += math.Exp(a)
		case variant == 1:
			sum += expFMA(a)
		default:
			sum += expNoFMA(a)
		}
	}
	return sum
}

package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

func init() {
	if cpu.X86.HasAVX && cpu.X86.HasF16C {
		widenHalf, narrowHalf = widenHalfF16C, narrowHalfF16C
	}
}

//go:noescape
func widenHalf8(dst *float32, src *uint16, n int)

//go:noescape
func narrowHalf8(dst *uint16, src *float32, n int)

// widenHalfF16C converts eight elements at a time with VCVTPH2PS, the tail
// in Go.
//
//go:norace
func widenHalfF16C(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := len(dst) &^ 7
	if n > 0 {
		widenHalf8(&dst[0], &src[0], n)
	}
	widenHalfGo(dst[n:], src[n:])
}

// narrowHalfF16C converts eight elements at a time with VCVTPS2PH (round
// to nearest even), the tail in Go.
//
//go:norace
func narrowHalfF16C(dst []uint16, src []float32) {
	src = src[:len(dst)]
	n := len(dst) &^ 7
	if n > 0 {
		narrowHalf8(&dst[0], &src[0], n)
	}
	narrowHalfGo(dst[n:], src[n:])
}

//go:noescape
func prefetchRows2(base unsafe.Pointer, offs *int, n, lines int)

// prefetchHalfRows asks for columns [c0, c1) of the rows at offs of the
// F16 caches kh and vh.
//
//go:norace
func prefetchHalfRows(kh, vh []uint16, offs []int, c0, c1 int) {
	if len(offs) == 0 || c1 <= c0 {
		return
	}
	lines := ((c1-c0)*2 + 63) / 64
	prefetchRows2(unsafe.Pointer(&kh[c0]), &offs[0], len(offs), lines)
	prefetchRows2(unsafe.Pointer(&vh[c0]), &offs[0], len(offs), lines)
}

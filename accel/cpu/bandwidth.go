package cpu

import (
	"runtime"
	"sync"
	"time"
)

// ReadBandwidth measures host memory read bandwidth in bytes/s: the best of
// three sums of a 256 MiB array split over threads goroutines (GOMAXPROCS
// when threads <= 0), with the vector kernel where there is one (plain Go
// sums are bound by their adds, not by memory, on these machines).
func ReadBandwidth(threads int) float64 {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	const n = 64 << 20
	a := make([]float32, n)
	for i := range a {
		a[i] = float32(i & 7)
	}
	best := 0.0
	sink := make([]float32, threads)
	vk := simdOps()
	for rep := 0; rep < 3; rep++ {
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := 0; w < threads; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				part := a[n*w/threads : n*(w+1)/threads]
				if vk != nil {
					sink[w] = vk.sum(part)
					return
				}
				var s0, s1, s2, s3 float32
				for i := 0; i+4 <= len(part); i += 4 {
					s0 += part[i]
					s1 += part[i+1]
					s2 += part[i+2]
					s3 += part[i+3]
				}
				sink[w] = s0 + s1 + s2 + s3
			}(w)
		}
		wg.Wait()
		best = max(best, float64(4*n)/time.Since(t0).Seconds())
	}
	return best
}

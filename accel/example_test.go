package accel_test

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
)

// Capture a small chain of kernels once, then replay it with one launch: the
// replay reads whatever its input holds at the time.
func ExampleCapture() {
	dev, _ := accel.Open("cpu", 0, accel.Options{MemoryLimit: 64 << 20})
	defer dev.Close()
	s, _ := dev.NewStream()
	defer s.Close()

	x, _ := accel.UploadF32(s, []float32{1, 2, 3, 4}, 1, 4)
	y, _ := accel.UploadF32(s, make([]float32, 4), 1, 4)
	pool, _ := dev.NewPool()
	defer pool.Release()

	g, err := accel.Capture(s, pool, func() error {
		l := accel.On(s)
		l.Add(y, x, x) // y = 2x
		l.Add(y, y, x) // y = 3x
		return l.Err()
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Destroy()
	exec, _ := g.Instantiate()
	defer exec.Destroy()

	exec.Launch(s)
	out, _ := accel.DownloadF32(s, y)
	fmt.Println(g.Nodes(), out)

	accel.Upload(s, x.Buf, accel.F32Bytes([]float32{10, 20, 30, 40}))
	exec.Launch(s)
	out, _ = accel.DownloadF32(s, y)
	fmt.Println(out)
	// Output:
	// 2 [3 6 9 12]
	// [30 60 90 120]
}

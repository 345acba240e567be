package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The packer places every request as the allocator does: the same block
// sizes, the same segments, whatever the mix of small and large.
func TestPackerMatchesAllocator(t *testing.T) {
	cases := []struct {
		name  string
		sizes func(r *rand.Rand) int64
	}{
		{"small", func(r *rand.Rand) int64 { return 1 + r.Int64N(SmallLimit) }},
		{"tiny", func(r *rand.Rand) int64 { return 1 + r.Int64N(8<<10) }},
		{"large", func(r *rand.Rand) int64 { return SmallLimit + 1 + r.Int64N(6<<20) }},
		{"mixed", func(r *rand.Rand) int64 {
			if r.IntN(3) == 0 {
				return SmallLimit + 1 + r.Int64N(5<<20)
			}
			return 1 + r.Int64N(300<<10)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 11))
			a := New(newSource(1 << 34))
			var p Packer
			for i := 0; i < 300; i++ {
				n := tc.sizes(r)
				before := a.Stats()
				if _, err := a.Alloc(0, n); err != nil {
					t.Fatal(err)
				}
				after := a.Stats()
				if got, want := p.Alloc(n), after.Allocated-before.Allocated; got != want {
					t.Fatalf("request %d of %d bytes: packer holds %d, allocator %d", i, n, got, want)
				}
				if p.Reserved() != after.Reserved || p.Held() != after.Allocated {
					t.Fatalf("request %d: packer reserved %d held %d, allocator %d and %d",
						i, p.Reserved(), p.Held(), after.Reserved, after.Allocated)
				}
			}
		})
	}
}

func ExamplePacker() {
	var p Packer
	for range 3 {
		p.Alloc(100 << 10) // three small outputs share one segment
	}
	p.Alloc(3 << 20) // a large one holds its whole 4 MiB segment: 1 MiB is not worth splitting off
	fmt.Println(p.Held(), p.Reserved())
	// Output: 4501504 6291456
}

package graph_test

import (
	"fmt"

	"github.com/reprise-ml/reprise/graph"
)

// Plan chooses the cheapest buckets across pools while the largest eager
// step (the floor) still fits beside them.
func ExamplePlan() {
	const mb = 1 << 20
	decode := func(bs int) graph.BucketKey {
		return graph.BucketKey{Walk: "decode", BatchSize: bs, Tokens: bs}
	}
	costs := map[graph.BucketKey]graph.CaptureCost{
		decode(1):  {Bucket: decode(1), Peak: 1 * mb, Graph: 2 * mb, Slots: 2},
		decode(8):  {Bucket: decode(8), Peak: 4 * mb, Graph: 6 * mb, Slots: 2},
		decode(64): {Bucket: decode(64), Peak: 16 * mb, Graph: 40 * mb, Slots: 2},
	}
	p := graph.Plan(map[string]map[graph.BucketKey]graph.CaptureCost{"decode": costs}, 30*mb, 0)
	fmt.Println("chosen:", p.Buckets["decode"])
	fmt.Println("pool:", p.Predicted["decode"]/mb, "MiB; floor:", p.Floor/mb, "MiB")
	fmt.Println("left out:", p.Why[decode(64)])
	// Output:
	// chosen: [decode[bs=8,tokens=8,key=] decode[bs=1,tokens=1,key=]]
	// pool: 6 MiB; floor: 16 MiB
	// left out: does not fit: it adds 35651584 bytes, 8388608 are left beside the 16777216-byte floor
}

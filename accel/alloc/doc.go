// Package alloc is the caching allocator every backend puts over its device
// memory, modelled on the one accelerator frameworks use, and what the
// backends share around it: a device's memory Budget, DeviceMemory (the
// memory half of accel.Device) and a stream's Capture state.
//
// Device memory is taken in segments: requests of at most 1 MiB share 2 MiB
// segments, larger ones get a segment of their own rounded up to a multiple of
// 2 MiB. Blocks inside a segment are split on allocation and merged with free
// neighbours on free, and a freed block is cached, not returned to the device,
// so the next step's allocations cost nothing. Every segment belongs to one
// pool and one stream: a block is reused only by allocations on the stream
// that freed it, which is safe because a stream runs its work in order.
//
// Pools: pool 0 is the default. A graph pool (NewPool) is private to captures:
// while a stream captures into it, that stream's allocations come from it, and
// blocks freed during the capture go back to it for later captures into the
// same pool. A pool's memory is returned to the device only when the pool has
// been released and every graph captured into it destroyed, because a graph's
// replays write wherever its capture allocated.
//
// Invariants (checked by Check, asserted by the property tests):
//   - the device's free memory plus the reserved segments is the capacity;
//   - inside a segment, blocks tile it exactly, with no two free neighbours;
//   - no two live blocks overlap;
//   - an out-of-memory error changes nothing but the cache it tried to free.
package alloc

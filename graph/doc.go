// Package graph is reprise's accelerator graph runner: it captures the device
// work of a model step once per shape bucket and replays it, making real,
// varying batches fit fixed captured shapes safely.
//
// A model declares Configs per walk (a named kind of step: prefill, decode).
// A Runner turns them into buckets keyed by (walk, batch size, tokens, key
// info), captures each bucket into one graph per double-buffer slot, and at
// each step leases the tightest bucket that fits, pads the batch with padding
// rows up to the bucket's size, stages the real inputs into the slot's static
// buffers and replays. The engine drives it through the Node interface, which
// this package owns: graph never imports the engine.
//
// A Runner's methods, by phase:
//   - Start-up: New, Prepare (claim every buffer before any capture), Size,
//     SizeLent, WarmedOutputs, ExecHeld and AgreePlan (measure and plan
//     with Plan, all ranks together), Capture (the planned buckets, all
//     ranks together), Close.
//   - Background (one rank, between steps): WarmNext (WarmDeferred: it was
//     refused for now), LeaveOut (what the plan did not choose), CaptureBucket, ReleaseWarmed, ReleasePadding.
//   - New weights of the same shapes (between steps): Update re-records
//     every slot and updates its executable in place.
//   - Per step: LeaseSlot (a LeaseRequest), PadInputs, DeclareInputsFor,
//     StepIDs, RunForward or RunRegion, then Release (the step
//     ran) or Discard (it will not); NoteEager for a step that ran eager.
//     PlanStream and Stream are the streams plans and replays go on.
//   - Inspection: Buckets, SelectBucket, SelectBatchedBucket, CapturesWalk,
//     MaxBatchSizeFor, Specs, Configs, NumSlots, Pool, PoolMemory,
//     OutsideMemory, ExecMemory, Telemetry, Unreplayed (every declared bucket that will
//     not replay, and why).
//
// Invariants:
//   - Every runner claims its static buffers (Prepare) before any runner
//     captures. Static inputs are interned per (config, input) at the largest
//     bucket's size; smaller buckets use leading slices of the same storage,
//     so no address a graph recorded ever moves.
//   - Buckets are captured largest first, so smaller graphs reuse the pool's
//     memory; a later capture that needs more room is an error.
//   - A bucket is registered whole (every slot captured and its golden replay
//     equal to eager) or not at all, and on every rank or on none: every rank
//     meets the same barriers whether its captures passed or failed, and
//     comm.Agree drops a bucket everywhere if any rank dropped it.
//   - A failed capture (error or panic) drops only its bucket, leaves the
//     stream and the pool usable, and is logged at ERROR by name.
//     Options.RequireGraphs (REPRISE_REQUIRE_ACCELERATOR_GRAPHS=1 on the
//     command line) makes Capture fail, naming every declared bucket that
//     will not replay: blocked walks, buckets the plan left out, drops.
//   - Padding rows have negative handles (below -1, which means unset), stable
//     per (prefix, key, index), so they never collide with a request id (>= 0).
//     Their capture-time storage is released after capture; replays pad with
//     zero-length rows that address only the sink.
//   - Outputs are copied at the end of each graph into buffers outside the
//     graph pool, so another graph's scratch in a shared pool never clobbers
//     them.
//   - The replay stream waits on the plan-done event before it replays; pre-plan
//     work never goes onto the replay stream.
package graph

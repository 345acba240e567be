// Package engine runs a model: it schedules requests into steps, executes
// each step through the model's resources and forward, and replays captured
// graphs (package graph) where a bucket fits.
//
// A step is declare -> admit -> plan -> forward -> commit. Resources hold
// per-request state: the paged KV cache (kvCache), positions (positionsResource),
// sampler state (sampler) and the penalties' device pool (penaltyPool, planned
// only into steps of the KeyPenalties variant); a stepRunner sweeps them in dependency order. A
// step with a graph lease plans into the lease's per-slot buffers and
// replays; a step without one plans into stream-ordered scratch and runs the
// model eagerly. While decode step N replays, step N+1 is admitted and
// planned into the other slot on the plan stream (pre-planning).
//
// One loop goroutine owns every resource: it admits waiting requests into
// prefill steps while the KV cache can promise their pages, decodes the
// running ones, drops cancelled ones, and (with Options.BackgroundCapture)
// captures graphs between steps. Submit, Stats and Close are safe from any
// goroutine.
//
// Models are seen only through the Model interface (and RegionModel for
// models with inner regions captured piecewise): models declare, the engine
// executes.
//
// Invariants:
//   - Padding rows never hold storage a real request could use: outside a
//     capture they stay at rest and address the KV cache's sink page.
//   - A running request never fails to grow: the KV cache promises a
//     request its pages when it is admitted, and a request that cannot be
//     promised them waits (backpressure), never fails.
//   - A lease whose key differs from the step's is an error
//     (ErrLeaseMismatch), never silently wrong output.
//   - Pre-plan work goes onto the plan stream only; the replay waits on the
//     plan's event. A stale pre-plan is undone before anything else admits.
//   - Every request ends with exactly one Done output, whatever happens.
//   - The eager path stays reachable (Options.Graphs false) and a request's
//     tokens do not depend on the batch, bucket or mode it ran in on a
//     deterministic device.
package engine

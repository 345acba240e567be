// Package comm is how the ranks of one model (tensor or pipeline parallel
// workers) agree with each other: a Group with a rank, a size, an all-gather
// and a barrier. The graph runner uses it so that every rank keeps the same
// captured graphs: a rank that replays a graph holding a collective while a
// peer runs eager would hang.
//
// Local is an in-process implementation, one goroutine per rank, for tests and
// single-process multi-device use. Single is the group of one.
//
// Invariant: every rank must call the collectives in the same order; a call is
// matched with the peers' calls by its position in that order, not by what it
// carries.
package comm

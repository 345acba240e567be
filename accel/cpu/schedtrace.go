package cpu

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/reprise-ml/reprise/accel"
)

// EnvScheduleTrace, set to a number of replays N, makes every static
// schedule time its phases: each worker's time running its items and
// waiting at the barrier after them, logged (INFO) as the mean per replay
// over each N replays, by kind of phase. It is for finding where a
// replayed step's time goes (a worker slowed within its part holds the
// other at the barrier; a phase's parts may be uneven); unset or 0, the
// schedules take no time stamps. Each worker's items are also timed in its
// thread's CPU time (Linux), which a loaded machine's other work does not
// inflate: the sum over the phases of the slowest worker's CPU time ("crit
// cpu") is what the step's phases would take on two free cores, barriers
// aside.
const EnvScheduleTrace = "REPRISE_CPU_SCHEDULE_TRACE"

// schedTrace is a schedule's phase times since its last report: ns[w][ph]
// is worker goroutine w's (0 the caller, 1.. the pool's) items, wait and
// items' thread CPU time in phase ph, added to by that goroutine only (atomically: the
// report, on the caller, may run while another worker is still leaving the
// last barrier, whose wait then counts in the next report).
type schedTrace struct {
	every uint64
	ns    [][][3]atomic.Int64
	// took[w] counts the slots worker w ran that were another's: a worker
	// late to a phase finds its slot taken and waits out the phase.
	took []atomic.Int64
}

func newSchedTrace(every uint64, W, np int) *schedTrace {
	t := &schedTrace{every: every, ns: make([][][3]atomic.Int64, W), took: make([]atomic.Int64, W)}
	for w := range t.ns {
		t.ns[w] = make([][3]atomic.Int64, np)
	}
	return t
}

// note adds worker w's times of phase ph: items from t0 to t1 (cpu of its
// thread's CPU time), waiting from t1 to t2.
func (t *schedTrace) note(w, ph int, t0, t1, t2 time.Time, cpu time.Duration) {
	if w >= len(t.ns) {
		return
	}
	t.ns[w][ph][0].Add(int64(t1.Sub(t0)))
	t.ns[w][ph][1].Add(int64(t2.Sub(t1)))
	t.ns[w][ph][2].Add(int64(cpu))
}

// phaseLabel names phase ph by its matmuls (weights' rows x columns and
// type, over every worker's part), else by its first item.
func (s *schedule) phaseLabel(ph int) string {
	var mm []string
	first := ""
	for w := 0; w < s.W; w++ {
		start := 0
		if ph > 0 {
			start = s.ends[w][ph-1]
		}
		for _, it := range s.parts[w][start:s.ends[w][ph]] {
			name := "copy"
			switch {
			case it.kind == itemSerial:
				name = "replay"
			case it.kind == itemKernel:
				name = it.c.op.String()
				if it.c.op == accel.OpMatMul {
					wt := &it.c.o[2]
					m := fmt.Sprintf("%dx%d %s", wt.rows, wt.cols, wt.dt)
					if !slices.Contains(mm, m) {
						mm = append(mm, m)
					}
				}
			}
			if first == "" {
				first = name
			}
		}
	}
	if len(mm) > 0 {
		return "matmul " + strings.Join(mm, ", ")
	}
	return first
}

// traceReport logs, every t.every runs, the mean times per run by kind of
// phase and clears them. Called by the replay's caller after a run.
func (s *schedule) traceReport() {
	t := s.trace
	if s.runs%t.every != 0 {
		return
	}
	type group struct {
		label  string
		phases int
		ns     [][3]int64 // per worker
		uneven int64      // Σ over the phases of the slowest part less the mean
		crit   int64      // Σ over the phases of the slowest part's CPU time
	}
	var groups []*group
	byLabel := map[string]*group{}
	tot := &group{label: "all phases", ns: make([][3]int64, s.W)}
	for ph := 0; ph < s.np; ph++ {
		if s.busy[ph] == 0 {
			continue
		}
		l := s.phaseLabel(ph)
		g := byLabel[l]
		if g == nil {
			g = &group{label: l, ns: make([][3]int64, s.W)}
			byLabel[l] = g
			groups = append(groups, g)
		}
		var sum, mx, mxc int64
		for w := 0; w < s.W; w++ {
			items, wait, cpu := t.ns[w][ph][0].Swap(0), t.ns[w][ph][1].Swap(0), t.ns[w][ph][2].Swap(0)
			for _, x := range []*group{g, tot} {
				x.ns[w][0] += items
				x.ns[w][1] += wait
				x.ns[w][2] += cpu
			}
			sum += items
			mx = max(mx, items)
			mxc = max(mxc, cpu)
		}
		for _, x := range []*group{g, tot} {
			x.phases++
			x.uneven += mx - sum/int64(s.W)
			x.crit += mxc
		}
	}
	ms := func(ns int64) string { return fmt.Sprintf("%.3f", float64(ns)/float64(t.every)/1e6) }
	var b strings.Builder
	for _, g := range append([]*group{tot}, groups...) {
		fmt.Fprintf(&b, "\n%4d phases", g.phases)
		for w := 0; w < s.W; w++ {
			fmt.Fprintf(&b, " | w%d items %s (cpu %s) wait %s", w, ms(g.ns[w][0]), ms(g.ns[w][2]), ms(g.ns[w][1]))
			if g == tot {
				fmt.Fprintf(&b, " took %.2f", float64(t.took[w].Swap(0))/float64(t.every))
			}
		}
		fmt.Fprintf(&b, " | uneven %s ms | crit cpu %s ms | %s", ms(g.uneven), ms(g.crit), g.label)
	}
	slog.Info("cpu: replay schedule phase times, mean ms per replay", "replays", t.every,
		"workers", s.W, "phases", s.np, "nodes", s.stats.Nodes, "table", b.String())
}

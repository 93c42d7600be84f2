package main

import (
	"fmt"
	"strings"
)

// What one box can show of the outbox's cost. The sinks' peers (the NATS
// server and the receivers) run on the same cores as the instances, MySQL
// and wrk, so their CPU is taken from the orders however cheap the relays
// are; and the webhook sends one SKU's events one POST at a time, so a hot
// SKU's events reach it no faster than one exchange after another.

// The outbox phase's CPU groups.
const (
	cpuInstances = "instances"
	cpuNATS      = "nats-server"
	cpuReceivers = "demo (receivers)"
)

// cores is the CPU of the group named name over the run's measured time
// (0 if it has none).
func (run outboxRun) cores(name string) float64 {
	for _, c := range run.cpu {
		if c.name == name {
			return c.cores
		}
	}
	return 0
}

// freeRelayBound is the most the runs with sinks could place against
// those without on this box if the relays cost nothing: perOrder is the
// box's CPU per order without sinks, peers the sinks' peers' CPU per order
// with them (the NATS server, and the demo's receivers less what the demo
// used without sinks), both in µs, and bound perOrder/(perOrder+peers),
// which assumes the box as busy with sinks as without. ok is false when a
// side has no run with figures.
func (r outboxResult) freeRelayBound() (perOrder, peers, bound float64, ok bool) {
	var offN, onN float64
	var demoOff float64
	for _, run := range r.runs {
		placed := run.wrk.placed()
		if run.on || run.box <= 0 || placed <= 0 {
			continue
		}
		perOrder += run.box / placed * 1e6
		demoOff += run.cores(cpuReceivers)
		offN++
	}
	if offN == 0 {
		return 0, 0, 0, false
	}
	perOrder, demoOff = perOrder/offN, demoOff/offN
	for _, run := range r.runs {
		if placed := run.wrk.placed(); run.on && placed > 0 {
			peers += (run.cores(cpuNATS) + max(0, run.cores(cpuReceivers)-demoOff)) / placed * 1e6
			onN++
		}
	}
	if onN == 0 {
		return 0, 0, 0, false
	}
	peers /= onN
	return perOrder, peers, perOrder / (perOrder + peers), true
}

// bounds states what this box allows the two cost goals: the on/off ratio
// with relays of no cost, and the webhook's one-SKU delivery rate against
// the orders' rate.
func (r outboxResult) bounds() []string {
	var lines []string
	if perOrder, peers, bound, ok := r.freeRelayBound(); ok {
		lines = append(lines, fmt.Sprintf("bound on this box's %d cores: without sinks the box spent %.0f µs of CPU per order (wrk's included); "+
			"with them the sinks' peers alone (nats-server and the demo's receivers, which share the cores) spent %.0f µs per order, "+
			"which relays of no cost would still leave to pay: sinks on <= %.0f/(%.0f+%.0f) = %.2fx of sinks off.",
			r.machine.Cores, perOrder, peers, perOrder, perOrder, peers, bound))
	}
	var each []string
	for _, run := range r.runs {
		rate, ok := run.received["webhook"]
		if !run.on || !ok {
			continue
		}
		after := "-"
		if run.drain > 0 && run.backlog > 0 {
			after = fmt.Sprintf("%.0f/s", float64(run.backlog)/run.drain)
		}
		each = append(each, fmt.Sprintf("round %d: %.0f events/s received while orders were placed at %.0f/s, %s once wrk stopped", run.round, rate, run.wrk.placed(), after))
	}
	if len(each) > 0 {
		lines = append(lines, "the webhook gets a SKU's events one POST at a time, each after the previous one's 2xx, so one hot SKU's events reach it at the rate of one exchange after another: "+
			strings.Join(each, "; ")+". Its lag stays bounded only while the SKU's orders come no faster than that.")
	}
	return lines
}

package chaos

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/testserver"
)

// A placement puts some of a rig's processes elsewhere than the host's
// loopback, for a row whose fault needs it (a link to cut, a server beside
// an instance). Each says in its own rule what it needs of the rest of the
// rig's configuration; newRig checks every rule before it starts anything,
// so a row that asks for a placement its rig cannot have fails at once,
// naming the placement, instead of running a fault that proves nothing.
type placement struct {
	name string
	set  func(*layout)
	// rule is checked once every placement of the rig is set.
	rule func(rigConfig, layout) error
}

// layout is what a rig's placements asked for; the zero layout is every
// process on the host's loopback.
type layout struct {
	// netns are the indexes of the instances that run each in a network
	// namespace of its own, joined to the host by three veth links (HTTP,
	// MySQL, Redis); MySQL and Redis are reached through a toxiproxy on the
	// host end of their link, so a row can cut a link (a partition) or slow
	// or break it (toxics).
	netns []int
	// ns0, if set, is instance 0's namespace, made by the row.
	ns0 *testserver.NetNS
	// redisDirect: the namespaced instances reach the row's Redis address
	// as it is, not through a proxy link.
	redisDirect bool
	// etcdBeside0: member 0 of the etcd cluster runs in instance 0's
	// namespace, the other two on the host end of a link of its own.
	etcdBeside0 bool
	// redlockProxied: every instance reaches each Redlock master through a
	// toxiproxy of its own.
	redlockProxied bool
}

// instances is the number of instances of every rig.
const instances = 3

// inNetNS puts the instances of these indexes each in a network namespace
// of its own (r.net[i]: its namespace, links and proxies). Rule: at least
// one index, each an instance's, none twice.
func inNetNS(which ...int) placement {
	return placement{
		name: fmt.Sprintf("inNetNS%v", which),
		set:  func(l *layout) { l.netns = append(l.netns, which...) },
		rule: func(_ rigConfig, l layout) error {
			if len(which) == 0 {
				return errors.New("no instance named")
			}
			seen := map[int]bool{}
			for _, i := range l.netns {
				if i < 0 || i >= instances || seen[i] {
					return fmt.Errorf("indexes %v: want distinct instances of 0..%d", l.netns, instances-1)
				}
				seen[i] = true
			}
			return nil
		},
	}
}

// allInNetNS puts every instance in a namespace of its own.
func allInNetNS() placement { return inNetNS(0, 1, 2) }

// instance0In runs instance 0 in ns, a namespace the row made (to put
// servers beside it). Rule: instance 0 is in a namespace (inNetNS(0)).
func instance0In(ns *testserver.NetNS) placement {
	return placement{
		name: "instance0In",
		set:  func(l *layout) { l.ns0 = ns },
		rule: func(_ rigConfig, l layout) error {
			if l.ns0 == nil {
				return errors.New("no namespace given")
			}
			return needsInstance0(l)
		},
	}
}

// redisDirect has the namespaced instances reach rigConfig.redisAddr as it
// is, with no Redis link or proxy of their own. Rule: the row gave that
// address (one it made reachable from the namespaces: the rig's own Redis
// listens on the host's loopback, which they cannot reach) and some
// instance is in a namespace.
func redisDirect() placement {
	return placement{
		name: "redisDirect",
		set:  func(l *layout) { l.redisDirect = true },
		rule: func(rc rigConfig, l layout) error {
			switch {
			case rc.redisAddr == "":
				return errors.New("no redisAddr: the rig's own Redis is out of the namespaces' reach")
			case len(l.netns) == 0:
				return errors.New("no instance in a namespace")
			}
			return nil
		},
	}
}

// etcdBesideInstance0 runs member 0 of the etcd cluster in instance 0's
// namespace and the other two on the host end of a link of its own
// (r.etcdLink): cutting it isolates member 0 and instance 0 together.
// Rule: the etcd gate, and instance 0 in a namespace.
func etcdBesideInstance0() placement {
	return placement{
		name: "etcdBesideInstance0",
		set:  func(l *layout) { l.etcdBeside0 = true },
		rule: func(rc rigConfig, l layout) error {
			if rc.gate != skulock.GateEtcd {
				return fmt.Errorf("gate %q: want %s", rc.gate, skulock.GateEtcd)
			}
			return needsInstance0(l)
		},
	}
}

// redlockProxied gives every instance a toxiproxy of its own to each
// Redlock master (r.masterPx[instance][master]), so that one instance's
// link to one master can be cut. Rule: the redlock gate.
func redlockProxied() placement {
	return placement{
		name: "redlockProxied",
		set:  func(l *layout) { l.redlockProxied = true },
		rule: func(rc rigConfig, _ layout) error {
			if rc.gate != skulock.GateRedlock {
				return fmt.Errorf("gate %q: want %s", rc.gate, skulock.GateRedlock)
			}
			return nil
		},
	}
}

// needsInstance0 is the rule of the placements that put something in
// instance 0's namespace.
func needsInstance0(l layout) error {
	if !slices.Contains(l.netns, 0) {
		return fmt.Errorf("instance 0 is not in a namespace (netns %v): add inNetNS(0)", l.netns)
	}
	return nil
}

// layout sets rc's placements and checks each one's rule.
func (rc rigConfig) layout() (layout, error) {
	var l layout
	for _, p := range rc.place {
		p.set(&l)
	}
	var errs []error
	for _, p := range rc.place {
		if err := p.rule(rc, l); err != nil {
			errs = append(errs, fmt.Errorf("placement %s: %w", p.name, err))
		}
	}
	return l, errors.Join(errs...)
}

// TestPlacementRules checks each placement's rule on the configurations
// the rows use and on ones it must refuse, without starting anything.
func TestPlacementRules(t *testing.T) {
	ns := &testserver.NetNS{}
	cases := []struct {
		name string
		rc   rigConfig
		want string // "" for valid; else a part of the error
	}{
		{"none", rigConfig{}, ""},
		{"every instance", rigConfig{place: []placement{allInNetNS()}}, ""},
		{"etcd member beside instance 0", rigConfig{gate: skulock.GateEtcd, place: []placement{inNetNS(0), etcdBesideInstance0()}}, ""},
		{"redlock proxied", rigConfig{gate: skulock.GateRedlock, place: []placement{redlockProxied()}}, ""},
		{"primary beside instance 0", rigConfig{redisAddr: "10.0.0.1:26379", place: []placement{inNetNS(0), instance0In(ns), redisDirect()}}, ""},
		{"index out of range", rigConfig{place: []placement{inNetNS(3)}}, "inNetNS[3]"},
		{"index twice", rigConfig{place: []placement{inNetNS(1), inNetNS(1)}}, "distinct"},
		{"no index", rigConfig{place: []placement{inNetNS()}}, "no instance named"},
		{"etcd beside, another gate", rigConfig{place: []placement{inNetNS(0), etcdBesideInstance0()}}, "etcdBesideInstance0: gate"},
		{"etcd beside, instance 0 on the host", rigConfig{gate: skulock.GateEtcd, place: []placement{inNetNS(1), etcdBesideInstance0()}}, "instance 0 is not"},
		{"redlock proxied, another gate", rigConfig{gate: skulock.GateEtcd, place: []placement{redlockProxied()}}, "redlockProxied: gate"},
		{"instance 0's namespace, on the host", rigConfig{place: []placement{instance0In(ns)}}, "instance0In: instance 0 is not"},
		{"instance 0's namespace, none", rigConfig{place: []placement{inNetNS(0), instance0In(nil)}}, "no namespace"},
		{"redis direct, the rig's own", rigConfig{place: []placement{inNetNS(0), redisDirect()}}, "no redisAddr"},
		{"redis direct, nobody namespaced", rigConfig{redisAddr: "10.0.0.1:6379", place: []placement{redisDirect()}}, "no instance in a namespace"},
	}
	for _, c := range cases {
		_, err := c.rc.layout()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: layout() = %v; want no error", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: layout() = %v; want an error containing %q", c.name, err, c.want)
		}
	}
}

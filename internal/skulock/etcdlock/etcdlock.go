// Package etcdlock is the SKU lock's etcd gate: a concurrency.Mutex of
// go.etcd.io/etcd/client/v3 on a session (a lease) of the hold's own, with
// a watchdog of this package that renews the lease and loses the hold at
// its local deadline, release by a compare on the key's create revision,
// and that revision as the fencing token. What it adds to the Mutex (for
// the Mutex's known pitfalls), how a lease of 0 differs from a fixed one,
// and what it cannot promise are in docs/reference.md ("The etcd gate");
// the decision is docs/decisions/0017-etcd-gate-and-histories.md.
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/gate"
)

// Locker is the service.Locker on an etcd cluster. It is safe for
// concurrent use; Close waits for its background releases and watchdogs.
type Locker struct {
	cli     *clientv3.Client
	prefix  string
	ttl     time.Duration // the watchdog's TTL: TryLock's lease 0
	timeout time.Duration // bound of one grant or release call
	lost    func()
	bg      gate.Background
	stop    chan struct{} // closed by Close: the watchdogs stop renewing
}

// New returns the locker on cli. Keys are prefix+"etcd-lock/"+gate.Name(sku)
// +"/"+<lease id in hex>. ttl is the kept-alive session's TTL (TryLock's
// lease 0); timeout bounds a lease grant and a release (the store is
// counted as down past it); lost, if set, is called once per hold lost
// unreleased.
func New(cli *clientv3.Client, prefix string, ttl, timeout time.Duration, lost func()) *Locker {
	return &Locker{cli: cli, prefix: prefix, ttl: ttl, timeout: timeout, lost: lost, stop: make(chan struct{})}
}

// Prefix is the Mutex prefix of sku's lock.
func (l *Locker) Prefix(sku string) string { return l.prefix + "etcd-lock/" + gate.Name(sku) }

// TryLock takes sku's lock within wait (past a first try, the Mutex's
// queue is fair: waiters get it in the order they queued), for lease (0:
// kept alive). Beyond wait it may spend the call timeout on the grant, on
// the first try and on reading the key it got. Errors:
// service.ErrLockNotObtained (joined with ctx's error when ctx ended), or a
// wrapped etcd error when the cluster did not answer the grant or the first
// try within the timeout (no quorum, no member reachable).
func (l *Locker) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	keep := lease <= 0
	if keep {
		lease = l.ttl
	}
	sent := time.Now()
	sess, granted, err := l.session(ctx, lease, keep)
	if err != nil {
		return nil, err
	}
	undo := func() { l.bg.Run(func() { l.revoke(sess) }) }
	m := concurrency.NewMutex(sess, l.Prefix(sku))
	fence, err := l.acquire(ctx, m, wait)
	if err != nil {
		undo()
		return nil, err
	}
	deadline := sent.Add(lease - drift(lease)) // a fixed lease: what was asked
	if !keep && !time.Now().Before(deadline) { // the wait used the whole lease up
		undo()
		return nil, errors.Join(service.ErrLockNotObtained, gate.ErrLockLost)
	}
	if keep {
		deadline = sent.Add(granted - drift(granted))
		if time.Since(sent) > granted/3 { // it waited: the grant's deadline is old news
			var lost bool
			if deadline, lost, err = l.renew(ctx, sess, granted); lost || err != nil {
				undo()
				return nil, errors.Join(service.ErrLockNotObtained, gate.ErrLockLost, err)
			}
		}
	}
	release := func(ctx context.Context) (bool, error) {
		defer undo()
		ctx, cancel := context.WithTimeout(ctx, l.timeout)
		defer cancel()
		return Release(ctx, l.cli, m)
	}
	lost := func() { // lost on this side: free the key for the others now
		if l.lost != nil {
			l.lost()
		}
		undo()
	}
	h := gate.NewLeaseHold(ctx, deadline, fence, lost, release)
	if keep {
		l.bg.Run(func() { l.watchdog(h, sess, granted) })
	}
	return h, nil
}

// drift is the allowance for this process's clock running slower than the
// leader's over d.
func drift(d time.Duration) time.Duration { return d/100 + 2*time.Millisecond }

// session grants a lease of ttl (whole seconds, rounded up) and returns a
// session on it, kept alive by the client library only when keep is set,
// and the TTL the cluster granted (it may raise it to its minimum).
func (l *Locker) session(ctx context.Context, ttl time.Duration, keep bool) (*concurrency.Session, time.Duration, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	gctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	g, err := l.cli.Grant(gctx, secs)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, errors.Join(service.ErrLockNotObtained, ctx.Err())
		}
		return nil, 0, fmt.Errorf("etcd: grant a lease: %w", err)
	}
	sctx := context.Background()
	if !keep {
		// A session whose keep-alive stops at once: the lease runs out.
		var stop context.CancelFunc
		sctx, stop = context.WithCancel(sctx)
		stop()
	}
	sess, err := concurrency.NewSession(l.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(g.TTL)), concurrency.WithContext(sctx))
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: session on lease %x: %w", g.ID, err)
	}
	return sess, time.Duration(g.TTL) * time.Second, nil
}

// acquire locks m within wait and returns the fence: the create revision
// of m's key. The first try is bounded by the call timeout, so a cluster
// that does not answer is an error and not a wait that ran out; only a
// lock held by someone else is waited for (the Mutex's fair queue).
func (l *Locker) acquire(ctx context.Context, m *concurrency.Mutex, wait time.Duration) (int64, error) {
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	err := m.TryLock(tctx)
	cancel()
	switch {
	case err == nil:
		return m.Header().Revision, nil // the put's own revision: a fresh key
	case !errors.Is(err, concurrency.ErrLocked):
		return 0, l.callErr(ctx, "try lock", err)
	case wait <= 0:
		return 0, service.ErrLockNotObtained
	}
	if err := l.wait(ctx, m, wait); err != nil {
		return 0, err
	}
	// Lock's header is the revision of its last read, not of the key: ask
	// for the key, on the condition that it is still ours.
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := l.cli.Txn(rctx).If(m.IsOwner()).Then(clientv3.OpGet(m.Key())).Commit()
	switch {
	case err != nil:
		return 0, l.callErr(ctx, "read the lock's key", err)
	case !resp.Succeeded: // the lease ran out between the two
		return 0, errors.Join(service.ErrLockNotObtained, gate.ErrLockLost)
	}
	return resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision, nil
}

// wait queues m for the lock for at most wait. The Mutex's Lock runs in
// the background: after a wait that failed it deletes its key on a context
// without a deadline, which must not hold the caller (the session's
// revocation deletes the key anyway).
func (l *Locker) wait(ctx context.Context, m *concurrency.Mutex, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	done := make(chan error, 1)
	l.bg.Run(func() { defer cancel(); done <- m.Lock(wctx) })
	var err error
	select {
	case err = <-done:
	case <-wctx.Done():
		err = wctx.Err()
	}
	switch {
	case err == nil:
		return nil
	case wctx.Err() != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return service.ErrLockNotObtained
	case errors.Is(err, concurrency.ErrSessionExpired):
		// The waiter's own lease ran out in the queue (a fixed lease
		// shorter than the wait): it would hold nothing.
		return errors.Join(service.ErrLockNotObtained, err)
	}
	return l.callErr(ctx, "lock", err)
}

// callErr maps a call's error: the caller's context ending is
// ErrLockNotObtained joined with it; anything else is the store's error.
func (l *Locker) callErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return errors.Join(service.ErrLockNotObtained, ctx.Err())
	}
	return fmt.Errorf("etcd: %s: %w", what, err)
}

// Release deletes m's key if it still has the create revision m made it
// with (one transaction), and reports whether it did. Unlike the Mutex's
// own Unlock (a plain delete of the key), a resent or stale release never
// deletes a key that a later Lock on the same session made again.
func Release(ctx context.Context, cli *clientv3.Client, m *concurrency.Mutex) (bool, error) {
	resp, err := cli.Txn(ctx).If(m.IsOwner()).Then(clientv3.OpDelete(m.Key())).Commit()
	if err != nil {
		return false, fmt.Errorf("etcd: unlock %q: %w", m.Key(), err)
	}
	return resp.Succeeded, nil
}

// revoke ends sess and revokes its lease (which deletes any key left on
// it), bounded by the clean-up timeout.
func (l *Locker) revoke(sess *concurrency.Session) {
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), gate.CleanupTimeout)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, sess.Lease())
}

// renew renews sess's lease once and returns the hold's new deadline: the
// renewal's send time plus the TTL the leader granted, less the drift
// allowance. lost is true when the lease is gone.
func (l *Locker) renew(ctx context.Context, sess *concurrency.Session, ttl time.Duration) (deadline time.Time, lost bool, err error) {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, ttl/3)
	defer cancel()
	resp, err := l.cli.KeepAliveOnce(ctx, sess.Lease())
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound), err == nil && resp.TTL <= 0:
		return time.Time{}, true, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("etcd: renew lease %x: %w", sess.Lease(), err)
	}
	got := time.Duration(resp.TTL) * time.Second
	return sent.Add(got - drift(got)), false, nil
}

// watchdog renews the lease of h every third of its TTL until h ends,
// moving h's deadline with each renewal that succeeded; h is lost when a
// renewal finds the lease gone, when the session ends, or when the locker
// is closed. A renewal that fails otherwise leaves the deadline as it was.
func (l *Locker) watchdog(h *gate.LeaseHold, sess *concurrency.Session, ttl time.Duration) {
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-h.Context().Done():
			return
		case <-l.stop:
			h.Lose()
			return
		case <-sess.Done():
			h.Lose()
			return
		case <-tick.C:
		}
		deadline, lost, err := l.renew(h.Context(), sess, ttl)
		switch {
		case lost:
			h.Lose()
			return
		case err == nil:
			h.Extend(deadline)
		}
	}
}

// Close loses the holds still kept alive (their contexts are cancelled and
// their leases revoked) and waits for the background waits, releases and
// revocations.
func (l *Locker) Close() error {
	close(l.stop)
	l.bg.Wait()
	return nil
}

// ClientConfig is how to reach the cluster: the etcd gate's own settings.
type ClientConfig struct {
	// The cluster's members, a comma list of `host:port` or
	// `http(s)://host:port`, as etcdctl takes them.
	Endpoints []string `env:"STOCK_ETCD_ENDPOINTS"`
	// The user, when the cluster has authentication on (then the connect
	// authenticates at start-up).
	Username string `env:"STOCK_ETCD_USERNAME"`
	// That user's password.
	Password string `env:"STOCK_ETCD_PASSWORD"`
	// PEM file of the CA that signed the members' certificates; any of the
	// three TLS files set turns TLS on (or `https://` endpoints).
	CA string `env:"STOCK_ETCD_CA"`
	// PEM file of this client's certificate (mutual TLS), with
	// `STOCK_ETCD_KEY`.
	Cert string `env:"STOCK_ETCD_CERT"`
	// PEM file of this client's private key.
	Key string `env:"STOCK_ETCD_KEY"`
	// Bound of the connect, of each lease grant and of each release; past
	// it the cluster counts as down (`STOCK_ON_REDIS_DOWN` applies).
	DialTimeout time.Duration `env:"STOCK_ETCD_DIAL_TIMEOUT" envDefault:"2s" min:"1ms" nonzero:"true"`
}

// Dial returns a client of the cluster. Without a username it connects
// lazily (a cluster that is down makes the calls fail, not Dial); with
// one, Dial authenticates, and fails past DialTimeout.
func Dial(cfg ClientConfig) (*clientv3.Client, error) {
	c := clientv3.Config{Endpoints: cfg.Endpoints, Username: cfg.Username, Password: cfg.Password,
		DialTimeout: cfg.DialTimeout, Logger: zap.NewNop(),
		// A member cut off without a word (a partition, not a crash) keeps
		// its connection "ready" and gets its share of the calls until a
		// keepalive ping goes unanswered: gRPC's shortest ping interval.
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 2 * time.Second}
	if cfg.CA != "" || cfg.Cert != "" || cfg.Key != "" {
		tlsCfg, err := (transport.TLSInfo{TrustedCAFile: cfg.CA, CertFile: cfg.Cert, KeyFile: cfg.Key}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd: TLS: %w", err)
		}
		c.TLS = tlsCfg
	}
	cli, err := clientv3.New(c)
	if err != nil {
		return nil, fmt.Errorf("etcd: connect to %v: %w", cfg.Endpoints, err)
	}
	return cli, nil
}

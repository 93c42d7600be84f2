package lock

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Which failures of PUBSUB SHARDNUMSUB settle the question (no sharded
// pub/sub: publish and subscribe the plain way from now on) and which leave
// it open for the next call.
func TestShardDetectionErrors(t *testing.T) {
	for _, tc := range []struct {
		err     error
		settled bool
	}{
		{replyErr("ERR Unknown subcommand or wrong number of arguments for 'SHARDNUMSUB'. Try PUBSUB HELP."), true},
		{replyErr("ERR unknown command 'pubsub'"), true},
		{replyErr("NOPERM this user has no permissions to run the 'pubsub|shardnumsub' command"), true},
		{replyErr("LOADING Redis is loading the dataset in memory"), false},
		{replyErr("CLUSTERDOWN The cluster is down"), false},
		{replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
		{context.DeadlineExceeded, false},
	} {
		if got := noSuchCommand(tc.err); got != tc.settled {
			t.Errorf("noSuchCommand(%v) = %v; want %v", tc.err, got, tc.settled)
		}
	}
}

// A cluster that cannot be reached is not taken for one without sharded
// pub/sub: the call answers plain, and the question stays open.
func TestShardDetectionRetriesAfterANetworkError(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1,
		DialTimeout: 100 * time.Millisecond})
	defer func() { _ = cc.Close() }()
	c := New(cc)
	defer func() { _ = c.Close() }()
	for range 2 {
		if c.sharded(context.Background()) {
			t.Fatal("sharded() = true on an unreachable cluster")
		}
		if v := c.shard.Load(); v != shardUnknown {
			t.Fatalf("after a network error the answer was kept (%d); want it asked again", v)
		}
	}
	r := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = r.Close() }()
	plain := New(r)
	defer func() { _ = plain.Close() }()
	if plain.sharded(context.Background()) {
		t.Fatal("sharded() = true on a non-cluster client")
	}
}

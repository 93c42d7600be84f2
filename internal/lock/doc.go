// Package lock is a reentrant distributed lock on Redis with a watchdog, wire
// compatible with Redisson's RLock, for go-redis v9. Start at [New] and
// [Client.Mutex]; the examples show a hold, re-entry through its context and
// the fencing token. Ownership lives in [Hold.Context], a lost hold cancels
// it with [ErrLockLost], waiting is fair (a line per Client, and a line of
// Clients in Redis), and every script is safe to reach Redis twice. The
// protocol, the guarantees in full, sharded pub/sub on a cluster and what no
// Redis lock can promise are in docs/reference.md ("The lock: protocol and
// guarantees"); the decisions are docs/decisions/0011 to 0013.
package lock

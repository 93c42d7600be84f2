-- A client leaves the line of waiters (its last waiter gave up).
-- KEYS[1] line of waiting clients, KEYS[2] their deadlines, KEYS[3] unlock
-- channel; ARGV[1] clientID, ARGV[2] '1' to SPUBLISH too (a cluster with
-- sharded pub/sub; absent otherwise)
-- The clients behind it counted its turn among the unlocks to let go by, so
-- leaving publishes one, as the turn it no longer takes. It publishes '2',
-- not the unlock message '0': Redisson's waiters act on 0 (and 1, a read
-- unlock) only, and the lock was not released; this package's waiters count
-- every message on the channel.
if redis.call('lrem', KEYS[1], 0, ARGV[1]) > 0 then
  redis.call('publish', KEYS[3], '2')
  if ARGV[2] == '1' then redis.pcall('spublish', KEYS[3], '2') end
end
redis.call('zrem', KEYS[2], ARGV[1])
return 1

-- Force unlock, as a compare-and-set on the owner the caller saw, so a resend
-- never deletes a lock that a waiter took after the first send.
-- KEYS[1] lock hash, KEYS[2] unlock channel, KEYS[3] latch of this call,
-- KEYS[4] and KEYS[5] RedissonFairLock's line and timeouts (read only: wakeFairWaiter)
-- ARGV[1] owner field the caller read, ARGV[2] a token of this call (never
-- reused), ARGV[3] latch lifetime in ms, ARGV[4] '1' to SPUBLISH the unlock
-- message too (a cluster with sharded pub/sub; absent otherwise)
-- Reply: 1 when the lock was deleted (by this send or an earlier one of the
-- same call), 0 when ARGV[1] no longer holds it.
if redis.call('get', KEYS[3]) == ARGV[2] then
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
if ARGV[4] == '1' then redis.pcall('spublish', KEYS[2], '0') end
wakeFairWaiter(KEYS[4], KEYS[5], KEYS[2], ARGV[4] == '1')
redis.call('set', KEYS[3], ARGV[2], 'px', ARGV[3])
return 1

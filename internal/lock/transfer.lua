-- Hand a fully released lock straight to the next waiter of the same client
-- (a bounded local hand-off: no PUBLISH or SPUBLISH, no race with other clients).
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] line, KEYS[4] line deadlines
-- ARGV[1] old owner, ARGV[2] new owner, ARGV[3] lease in ms, ARGV[4] clientID
-- Reply: {fence} of the new chain, or 0 when the old owner did not hold it at count 1.
if redis.call('hget', KEYS[1], ARGV[2]) == '1' then
  return {tonumber(redis.call('get', KEYS[2]) or '0')} -- a resend of this call
end
if redis.call('hget', KEYS[1], ARGV[1]) ~= '1' then
  return 0
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[3])
-- Served now: leave the line; the client's next waiter joins at the back.
redis.call('lrem', KEYS[3], 0, ARGV[4])
redis.call('zrem', KEYS[4], ARGV[4])
return {redis.call('incr', KEYS[2])}

-- Release one level of a chain, as a compare-and-set on the count so a resend is a no-op.
-- KEYS[1] lock hash, KEYS[2] unlock channel, KEYS[3] unlock latch of this chain
-- (named by its fencing token, holding the owner field), KEYS[4] and KEYS[5]
-- RedissonFairLock's line and timeouts (read only: wakeFairWaiter)
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] count the caller last saw,
-- ARGV[4] latch lifetime in ms, ARGV[5] '1' to SPUBLISH the unlock message too
-- (a cluster with sharded pub/sub; absent otherwise). SPUBLISH goes by pcall
-- here and in force.lua and leave.lua: a node that refuses it must not leave
-- the release half done.
-- Reply: 1 still held (count decremented), 2 fully released, 0 not held, -1 count mismatch.
local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
local want = tonumber(ARGV[3])
if c == nil then
  if want == 1 and redis.call('get', KEYS[3]) == ARGV[2] then
    return 2 -- an earlier send of this call released it
  end
  return 0
end
if c == want - 1 then
  return 1 -- an earlier send of this call already decremented
end
if c ~= want then
  return -1
end
if c > 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], -1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
if ARGV[5] == '1' then redis.pcall('spublish', KEYS[2], '0') end
wakeFairWaiter(KEYS[4], KEYS[5], KEYS[2], ARGV[5] == '1')
redis.call('set', KEYS[3], ARGV[2], 'px', ARGV[4])
return 2

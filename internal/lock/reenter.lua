-- Re-entry of a held chain, as a compare-and-set on the count so a resend is a no-op.
-- KEYS[1] lock hash
-- ARGV[1] lease in ms, ARGV[2] owner field, ARGV[3] count the caller last saw
-- Reply: the new count; 0 when the owner no longer holds the lock; -1 on a count mismatch.
local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if c == nil then
  return 0
end
local want = tonumber(ARGV[3])
if c == want then
  c = redis.call('hincrby', KEYS[1], ARGV[2], 1)
elseif c ~= want + 1 then
  return -1
end
redis.call('pexpire', KEYS[1], ARGV[1])
return c

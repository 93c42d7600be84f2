-- Batched watchdog renewal: one call for many holds of one hash slot.
-- KEYS[i] lock hash i; ARGV[1] lease in ms; ARGV[i+1] owner field of hold i
-- Reply: array, 1 where the lease was extended, 0 where the owner lost the lock.
local r = {}
for i, key in ipairs(KEYS) do
  if redis.call('hexists', key, ARGV[i + 1]) == 1 then
    redis.call('pexpire', key, ARGV[1])
    r[i] = 1
  else
    r[i] = 0
  end
end
return r

-- Batched watchdog renewal: one call extends many holds of one hash slot.
-- KEYS: the lock hashes; ARGV[1] lease in ms, then the owner field of each
-- lock, in the order of KEYS.
-- Reply: the positions (1-based) of the locks their owner no longer holds;
-- every other lock has its lease again.
local lost = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 0 then
    lost[#lost + 1] = i
  else
    redis.call('pexpire', KEYS[i], ARGV[1])
  end
end
return lost

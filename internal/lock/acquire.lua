-- Fresh acquire of a lock chain (Redisson RLock layout).
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] lease in ms, ARGV[2] owner field "<clientID>:<holdID>" (never reused)
-- Reply: {fence} when acquired; otherwise the holder's PTTL in ms.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {redis.call('incr', KEYS[2])}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  -- The owner field is minted for this one attempt, so finding it means an
  -- earlier send of this same call already acquired: answer as it did.
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {tonumber(redis.call('get', KEYS[2]) or '0')}
end
return redis.call('pttl', KEYS[1])

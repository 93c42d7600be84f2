-- Force unlock whoever holds it.
-- KEYS[1] lock hash, KEYS[2] unlock channel
-- Reply: 1 when a lock was deleted, 0 when none was held.
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], '0')
  return 1
end
return 0

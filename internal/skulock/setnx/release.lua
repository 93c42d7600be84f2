-- Release of a SET NX lock: KEYS[1] the lock, ARGV[1] the hold's token.
-- The key goes only while it still holds this token, so an expired hold
-- never deletes the next holder's lock. Reply: 1 released, 0 not held (also
-- for a second send of the same release).
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1

-- Compare-and-delete: KEYS[1] the lock, ARGV[1] the hold's token. Deletes
-- the key only while it still holds this token (never the next holder's
-- lock after an expiry); 1 released, 0 not held. Sending it twice is safe.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

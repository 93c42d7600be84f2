-- The bare gate: SET key token NX PX lease. KEYS[1] the lock, KEYS[2] its
-- fencing counter; ARGV[1] the hold's random token, ARGV[2] the lease in ms.
-- Returns the new fencing token, or 0 when someone else holds the lock.
-- A resend of the same call (go-redis retries after a network error) finds
-- its own token and answers the fence it was given, not "held".
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
return 0

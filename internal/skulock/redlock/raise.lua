-- Raise a node's fencing counter to at least ARGV[1] (KEYS[1] the counter);
-- never lowers it. Returns the counter's value afterwards.
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[1])
if c < want then
  redis.call('SET', KEYS[1], want)
  return want
end
return c

-- Prepended to release.lua and force.lua.
-- wakeFairWaiter wakes the thread that a RedissonFairLock unlock would: the
-- first in Redisson's line (KEYS line, "redisson_lock_queue:{name}") whose
-- timeout (in timeouts, "redisson_lock_timeout:{name}") has not passed, on
-- that thread's own channel, "<channel>:<uuid>:<threadId>". A fair thread
-- listens on nothing else, so without it the thread would sleep until its
-- wait ran out. Redisson's line is only read: it is Redisson's to change.
local function wakeFairWaiter(line, timeouts, channel, sharded)
  local first = redis.call('lrange', line, 0, 9)
  if #first == 0 then return end
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, thread in ipairs(first) do
    local due = redis.call('zscore', timeouts, thread)
    if due and tonumber(due) > now then
      redis.call('publish', channel .. ':' .. thread, '0')
      if sharded then redis.pcall('spublish', channel .. ':' .. thread, '0') end
      return
    end
  end
end

-- Fresh acquire of a lock chain (Redisson RLock layout), fair between clients.
-- KEYS[1] lock hash, KEYS[2] fencing counter,
-- KEYS[3] line of waiting clients (list), KEYS[4] their deadlines (zset, ms)
-- ARGV[1] lease in ms, ARGV[2] owner field "<clientID>:<holdID>" (never reused),
-- ARGV[3] how long a line entry lives without a retry, in ms
--         (0: a single attempt that does not join the line)
-- The line holds clientIDs: the owner field up to its last ':'.
-- Reply: {fence} when acquired; otherwise {wait, skip}: how long to wait at
-- most, in ms (the holder's PTTL, or the deadline of the client first in
-- line), and how many unlocks will hand the lock to clients ahead of this one
-- (-1: unknown, try at the next).
local now = nil
local function clock()
  if not now then
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

local client = nil
local function id()
  if not client then client = string.match(ARGV[2], '^(.*):') end
  return client
end

-- Drop waiters at the front of the line that stopped retrying (gone or dead).
local first = redis.call('lindex', KEYS[3], 0)
while first do
  local deadline = tonumber(redis.call('zscore', KEYS[4], first))
  if deadline and deadline > clock() then break end
  redis.call('lpop', KEYS[3])
  redis.call('zrem', KEYS[4], first)
  first = redis.call('lindex', KEYS[3], 0)
end

if redis.call('exists', KEYS[1]) == 0 then
  if (not first) or first == id() then
    if first then
      redis.call('lpop', KEYS[3])
      redis.call('zrem', KEYS[4], first)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {redis.call('incr', KEYS[2])}
  end
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  -- The owner field is minted for this one call, so finding it means an
  -- earlier send of this same call already acquired: answer as it did.
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {tonumber(redis.call('get', KEYS[2]) or '0')}
end

local wait = redis.call('pttl', KEYS[1])
local held = wait ~= -2
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  if not redis.call('zscore', KEYS[4], id()) then
    redis.call('rpush', KEYS[3], id())
  end
  redis.call('zadd', KEYS[4], clock() + ttl, id())
  redis.call('pexpire', KEYS[3], 3 * ttl)
  redis.call('pexpire', KEYS[4], 3 * ttl)
end
if wait == -2 then
  -- Free, but another client is first in line: wait for it, at most until
  -- its entry lapses.
  local first = redis.call('lindex', KEYS[3], 0)
  wait = 1
  if first then
    wait = math.max(1, tonumber(redis.call('zscore', KEYS[4], first)) - clock())
  end
end
-- How many unlocks to let go by before trying again: each unlock hands the
-- lock to the client first in line, and when the lock is free the first in
-- line is taking it now, without an unlock. The holder's own client may be in
-- line too (a waiter of it tried while it held): its entry leaves the line
-- with a local hand-off (transfer.lua), which publishes nothing, so it is not
-- counted; counting it would make this client sleep through its turn. (When
-- the holder unlocks instead, this client looks once too early: harmless.)
local skip = -1
if ttl > 0 then
  local pos = redis.call('lpos', KEYS[3], id())
  if pos then
    skip = pos
    if not held then
      skip = pos - 1
    elseif pos > 0 then
      local owner = redis.call('hkeys', KEYS[1])[1]
      local holder = owner and string.match(owner, '^(.*):')
      local hpos = holder and redis.call('lpos', KEYS[3], holder)
      if hpos and hpos < pos then skip = pos - 1 end
    end
  end
end
return {wait, skip}

-- Make a permit-expirable semaphore of a size, or change its size.
--
-- KEYS[1]  "dlock:{name}:psem": the number of permits
-- KEYS[2]  "dlock:{name}:psem:held" (psem_acquire.lua)
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- KEYS[4]  channel "dlock:{name}:psem:ch"
-- ARGV[1]..ARGV[6]  as sem_set.lua's: the size or change, the operation's
--          sequence number and record lifetime, the idle time (ms), the
--          mode ("set", "resize", "add") and the publish command
--
-- Returns {1, size} made or changed, {0, size} "set" found that size,
-- {-1, size} "set" found another or "add" would go below 0 (nothing
-- changed), as sem_set.lua, whose comment says why. Permits held beyond
-- a shrunk size stay held until released or expired; no new one is
-- granted until fewer than the size are held.
--
-- Idle keys: the number of permits expires ARGV[4] after the last live
-- permit's lease ends (the held set expires with that lease itself).
--
-- Resend safety as sem_set.lua's (lib/op_record.lua).

--@include op_record
--@include kinds
--@include sem_size

local recorded = op_replay(KEYS[3], ARGV[2])
if recorded then
    return {1, recorded}
end
local clash = kinds_clash(string.sub(KEYS[1], 1, -6), ':psem')
if clash then
    return clash
end
local n, mode = tonumber(ARGV[1]), ARGV[5]
local size = tonumber(redis.call('GET', KEYS[1]))
local new, unchanged = sem_size_new(size, n, mode)
if not new then
    return unchanged
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
local until_ms = math.max(now, tonumber(last) or 0) + tonumber(ARGV[4])
redis.call('SET', KEYS[1], new, 'PXAT', until_ms)
if new > (size or 0) then
    redis.call(ARGV[6], KEYS[4], new - (size or 0))
end
op_record(KEYS[3], ARGV[2], new, ARGV[3])
return {1, new}

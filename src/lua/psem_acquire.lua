-- Take one permit of a permit-expirable semaphore.
--
-- KEYS[1]  "dlock:{name}:psem": number of permits (missing = 0)
-- KEYS[2]  "dlock:{name}:psem:held": sorted set, permit id -> expiry
--          (server time in ms)
-- KEYS[3]  channel "dlock:{name}:psem:ch"
-- ARGV[1]  new permit id (random, from the client)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  "publish" or "spublish"
-- ARGV[4]  how long an idle semaphore is kept (ms, DLOCK_IDLE_MS)
-- ARGV[5]  (optional) the number of permits the caller's handle was
--          opened with: a semaphore that is gone (it expired idle) is
--          made anew with it
--
-- Returns {1} when taken, or {0, ms} where ms is how long until the next
-- permit expires (-1 when none is held): the waiter's sleep bound.
--
-- Expired permits are reclaimed here, lazily, so a holder that crashed
-- gives its permit back after its lease without anyone's help. Resending
-- with the same id (lost reply) finds the permit already held and keeps
-- it, never taking a second one.
--
-- Idle keys: the number of permits is kept until ARGV[4] after the last
-- live permit's lease ends (psem_renew.lua stretches it with the leases).
--
-- One NAME, one kind: a NAME that is a lock, a plain semaphore or a
-- latch is refused (lib/kinds.lua).

--@include kinds

local clash = kinds_clash(string.sub(KEYS[1], 1, -6), ':psem')
if clash then
    return clash
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local expiry = now + tonumber(ARGV[2])
local function keep_alive()
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[2], last[2])
    redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]) + tonumber(ARGV[4]))
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    redis.call('ZADD', KEYS[2], expiry, ARGV[1])
    keep_alive()
    return {1}
end
local permits = tonumber(redis.call('GET', KEYS[1]))
if not permits and ARGV[5] then
    permits = tonumber(ARGV[5])
    redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[4])
end
permits = permits or 0
if redis.call('ZCARD', KEYS[2]) < permits then
    redis.call('ZADD', KEYS[2], expiry, ARGV[1])
    keep_alive()
    return {1}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
    return {0, tonumber(first[2]) - now}
end
return {0, -1}

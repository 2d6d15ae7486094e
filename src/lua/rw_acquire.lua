-- Acquire a read or write hold of a read-write lock.
--
-- KEYS[1]  "dlock:{name}:rw": hash with fields
--            writer, wcount, token    the write hold, if any
--            r:<owner>, e:<owner>     each reader's count and expiry (ms, server time)
-- KEYS[2]  fencing counter of the name's slot "dlock:fence:{TAG}"
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  holds of this mode the caller believes it has
-- ARGV[4]  "read" or "write"
-- ARGV[5]  fencing floor of a write hold (see acquire.lua)
--
-- Returns {1, token} when acquired (for reads, the counter's last token:
-- at least that of the latest write hold of this name), {0, ms} when busy (ms: longest the blocker can keep it, -1
-- unknown), or {-1} when a write is asked for by an owner holding a read:
-- that upgrade would wait for itself forever, so it is refused.
--
-- Readers keep their expiry in the hash, not in keys of their own, so that
-- every key is named in KEYS (a Cluster rule). A reader that crashed stops
-- renewing; its fields are purged here once its expiry has passed, which
-- is how a dead reader's hold ends by itself. The hash's own TTL is kept at
-- the longest live hold, so it vanishes when the last hold ends.
--
-- Resend safety: the hold counts are set from ARGV[3], not incremented, so
-- a resend after a lost reply takes the hold the first run took once
-- instead of counting it twice (a write hold gets a new token: see below).
--
-- Fencing tokens (write holds only) as in acquire.lua, see lib/fence.lua.

--
-- One NAME, one kind: a NAME held as a plain or fair lock, or used as a
-- semaphore or latch, is refused with an error naming it (lib/kinds.lua).

--@include fence
--@include kinds

local clash = kinds_clash(string.sub(KEYS[1], 1, -4), ':rw')
if clash then
    return clash
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, lease, mine = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- Purge dead readers; note the earliest live reader expiry.
local fields = redis.call('HGETALL', KEYS[1])
local readers, soonest = 0, nil
for i = 1, #fields, 2 do
    local f = fields[i]
    if string.sub(f, 1, 2) == 'e:' then
        local e = tonumber(fields[i + 1])
        local who = string.sub(f, 3)
        if e <= now then
            redis.call('HDEL', KEYS[1], f, 'r:' .. who)
        else
            if who ~= owner then
                readers = readers + 1
                if not soonest or e < soonest then soonest = e end
            end
        end
    end
end

local function stretch_ttl()
    if redis.call('PTTL', KEYS[1]) < lease then
        redis.call('PEXPIRE', KEYS[1], lease)
    end
end

local writer = redis.call('HGET', KEYS[1], 'writer')

if ARGV[4] == 'read' then
    if writer and writer ~= owner then
        return {0, redis.call('PTTL', KEYS[1])}
    end
    redis.call('HSET', KEYS[1], 'r:' .. owner, mine + 1, 'e:' .. owner, now + lease)
    stretch_ttl()
    return {1, tonumber(fence_last(KEYS[2], KEYS[1] .. ':fence'))}
end

-- A write hold of ours that the caller does not know of (mine == 0: a lost
-- reply, or a released hold brought back by a failover) is granted afresh
-- below with a new token, as in acquire.lua.
if writer == owner and mine > 0 then
    redis.call('HSET', KEYS[1], 'wcount', mine + 1)
    stretch_ttl()
    return {1, tonumber(redis.call('HGET', KEYS[1], 'token'))}
end
if writer and writer ~= owner then
    return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('HEXISTS', KEYS[1], 'r:' .. owner) == 1 then
    return {-1}
end
if readers > 0 then
    return {0, soonest - now}
end
local token, text = fence_next(KEYS[2], KEYS[1] .. ':fence', t, ARGV[5])
redis.call('HSET', KEYS[1], 'writer', owner, 'wcount', 1, 'token', text)
stretch_ttl()
return {1, token}

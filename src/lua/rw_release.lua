-- Release one read or write hold of a read-write lock.
--
-- KEYS[1]  "dlock:{name}:rw" (see rw_acquire.lua)
-- KEYS[2]  channel "dlock:{name}:rw:ch"
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, restored while holds remain
-- ARGV[3]  holds of this mode the caller has before this release
-- ARGV[4]  "read" or "write"
-- ARGV[5]  "publish" or "spublish"
--
-- Returns the holds of this mode left, or -1 when the caller held none
-- (expired: nothing is changed). The last write release wakes every
-- waiter ("*": all readers may go at once); the last read release wakes
-- one (a writer, if one waits).
--
-- Resend safety: counts are set from ARGV[3]; a resend of the last
-- release finds no hold and returns -1, which the caller that knows it
-- resent (src/rwlock.c) reads as done.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, left = ARGV[1], tonumber(ARGV[3]) - 1
local wake

if ARGV[4] == 'read' then
    local e = tonumber(redis.call('HGET', KEYS[1], 'e:' .. owner))
    if not e or e <= now then
        return -1
    end
    if left > 0 then
        redis.call('HSET', KEYS[1], 'r:' .. owner, left, 'e:' .. owner, now + tonumber(ARGV[2]))
        if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
            redis.call('PEXPIRE', KEYS[1], ARGV[2])
        end
        return left
    end
    redis.call('HDEL', KEYS[1], 'r:' .. owner, 'e:' .. owner)
    wake = '1'
else
    if redis.call('HGET', KEYS[1], 'writer') ~= owner then
        return -1
    end
    if left > 0 then
        redis.call('HSET', KEYS[1], 'wcount', left)
        return left
    end
    redis.call('HDEL', KEYS[1], 'writer', 'wcount', 'token')
    wake = '*'
end
if redis.call('HLEN', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1])
end
redis.call(ARGV[5], KEYS[2], wake)
return 0

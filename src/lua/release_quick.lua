-- Release one hold of a plain reentrant lock nobody is waiting for.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  waiting processes "dlock:{name}:w" (acquire.lua)
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, restored while holds remain
-- ARGV[3]  holds the caller has before this release (at least 1)
--
-- Returns -1 when ARGV[1] is not the owner, else the holds left, as
-- release.lua does; or -4, having changed nothing, when the last hold
-- would go while processes are registered as waiting: the caller then
-- sends release.lua, which wakes or hands the lock to the next of them.
--
-- Why a second script: release.lua takes six keys and seven arguments
-- so that it can wake, reserve and hand over, and each argument costs
-- the server about 1 100 instructions to take in (parsing it, its
-- object, its Lua string: a key of a lock's size, by callgrind; an
-- uncontended pair costs about 112 000 with this script,
-- measured; CHANGELOG.md). An uncontended release needs two keys and
-- three arguments. The caller
-- (src/lock.c, release_call_quicken) sends this one only for a hold
-- shorter than a millisecond, where the saving counts, and only when no
-- thread or acquisition of its own process waits for the lock (those
-- release.lua must know of) and the handle has not lately found the lock
-- busy nor had a release sent back: under contention the detour costs
-- one short call now and then, not one a release.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
    return -1
end
if ARGV[3] ~= '1' then
    local left = tonumber(ARGV[3]) - 1
    redis.call('HSET', KEYS[1], 'count', left)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return left
end
if redis.call('EXISTS', KEYS[2]) == 1 then
    return -4
end
redis.call('DEL', KEYS[1])
return 0

-- Acquire (or re-enter) a reentrant lock.
--
-- KEYS[1]  lock hash "dlock:{name}": owner, count, token
-- KEYS[2]  fencing counter of the name's slot "dlock:fence:{TAG}" (never expires)
-- ARGV[1]  owner: "<client id>:<thread number>:<handle number>"
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  holds the caller believes it has (0 for a first acquisition)
-- ARGV[4]  fencing floor: a new token is above it (optional, see lib/fence.lua)
-- KEYS[3]  (optional, with ARGV[5]) "dlock:{name}:r": the process a
--          release woke, for a few milliseconds (release.lua)
-- ARGV[5]  the caller's client id
-- KEYS[4]  (optional, with ARGV[6..7]) waiting processes "dlock:{name}:w":
--          sorted set, client id -> the time (ms) it counts as gone
-- ARGV[6]  how long a registered process counts as waiting (ms)
-- ARGV[7]  "0" or absent: the caller is not waiting (a first attempt);
--          "1": it is its process's only waiter; "2": other threads or
--          acquisitions of its process wait too, so taking the lock keeps
--          the process registered
-- KEYS[5]  (optional, with KEYS[4]) "dlock:{name}:o": offers of waiting
--          processes, client id -> "<lease> <floor> <sent> <wait id> <owner>"
-- ARGV[8]  (optional, with KEYS[5] and ARGV[7] "1") the caller's offer: a
--          release may hand it the lock without an attempt of its own
--          (release.lua); <sent> is when the caller sent this attempt, by
--          its own clock
--
-- The keys and arguments a call does not need are left off (a first
-- attempt sends three keys and five arguments, RedLock two and four):
-- each one costs the server a little on every call.
--
-- Returns {1, token} when newly granted, {2, token, count} on re-entry,
-- {0, pttl} when another owner holds it (pttl bounds the caller's sleep).
--
-- Waiting processes: a caller that will wait registers its process when
-- the lock is busy, and each retry pushes its time forward; release.lua
-- wakes the registered process that retried least recently, rather than
-- every subscribed process (a herd of retries, all but one in vain). A
-- process that takes the lock leaves the set unless it has more waiters.
-- A process that died stays until its time passes; the one release that
-- picks it in between is lost, which costs the other waiters at most
-- their next timed retry (the holder's lease, 2 s at most).
--
-- The woken process has the free lock to itself for a few milliseconds
-- (KEYS[3]): a newcomer of another process, which would otherwise take it
-- first (its attempt is sent at once, the woken waiter's only after the
-- message reaches it), is answered busy for that long and registers.
-- This bounds barging across processes; a woken process that does not
-- come (it died, or its waiter gave up) holds the lock up only that long.
--
-- An offer belongs to a registration: it is made by a process's only
-- waiter (ARGV[7] "1"), and dropped whenever the process registers
-- without one (another of its waiters, which could not both be handed
-- the lock) or takes the lock. release.lua drops it when it picks the
-- process.
--
-- Why ARGV[3]: a client that lost the reply to an earlier attempt cannot
-- know whether that attempt ran, and after a failover a replica may bring
-- back a hold of ours that we had already released (the release had not
-- reached it). Either way the server says "yours" while the caller knows of
-- no hold. That hold's token was never seen by the caller, or has since
-- been passed by others' tokens that the replica never heard of, so it is
-- granted afresh with a new token (count 1), never adopted with its old
-- one: tokens stay strictly rising, and a resend cannot leave the count one
-- too high. Only a caller that knows it holds the lock (ARGV[3] > 0)
-- re-enters with the same token.
--
-- Fencing tokens: max(last + 1, server time in microseconds, floor + 1),
-- see lib/fence.lua.

--@include fence

-- One EXISTS over the lock and the reservation first: when neither is
-- there (every uncontended acquisition) it answers for both, where HGET
-- and GET took two calls, and each redis.call costs the server about as
-- much as a small command of its own (measured; CHANGELOG.md). A
-- caller that knows it holds the lock (ARGV[3] > 0) skips it: the lock is
-- there. A busy lock costs one call more than before, an attempt that
-- finds it busy being rarer than one that finds it free.
--
-- Numbers are read and written as text where the text is known (the
-- client writes ARGV[3] in decimal, "0" for none): tonumber() is C's
-- strtod and a Lua number passed to redis.call is formatted by printf:
-- the four conversions this saves on an uncontended pair were 4 % of the
-- server's instructions for it (measured with callgrind; CHANGELOG.md).
--
-- The same EXISTS asks after the other kinds' keys of NAME (a read-write
-- lock, a semaphore, a latch: lib/kinds.lua), so that one NAME is one
-- lock: when it finds one, the acquire is refused with an error naming
-- that kind, before anything is written. The four more keys, made here
-- from KEYS[1] rather than sent, cost the uncontended pair about 5 % more
-- server instructions (5 700 of 112 000, measured; CHANGELOG.md).
local mine = ARGV[3] ~= '0'
local owner
local b = KEYS[1]
if mine or redis.call('EXISTS', b, KEYS[3] or b, b .. ':rw', b .. ':sem', b .. ':psem', b .. ':latch') > 0 then
    if not mine then
--@include kinds
        local clash = kinds_clash(b, '')
        if clash then
            return clash
        end
    end
    owner = redis.call('HGET', KEYS[1], 'owner')
else
    KEYS[3] = nil -- not there: nothing to read below
end

if owner == ARGV[1] and mine then
    local count = tonumber(ARGV[3]) + 1
    redis.call('HSET', KEYS[1], 'count', count)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {2, tonumber(redis.call('HGET', KEYS[1], 'token')), count}
end

-- Busy: another owner holds it, or it is kept for the process a release
-- woke. No local functions below: each would be made anew on every call,
-- and this is the path every acquisition takes.
local busy
if owner and owner ~= ARGV[1] then
    busy = KEYS[1]
elseif KEYS[3] then
    local woken = redis.call('GET', KEYS[3])
    if woken and woken ~= ARGV[5] then
        busy = KEYS[3]
    elseif woken then
        redis.call('DEL', KEYS[3])
    end
end

local mode = KEYS[4] and ARGV[7] or '0'
if mode ~= '0' then
    if busy or mode == '2' then
        -- register the process (and its offer, or drop a stale one)
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), ARGV[5])
        redis.call('PEXPIRE', KEYS[4], ARGV[6])
        if KEYS[5] and ARGV[8] and mode == '1' then
            redis.call('HSET', KEYS[5], ARGV[5], ARGV[8])
            redis.call('PEXPIRE', KEYS[5], ARGV[6])
        elseif KEYS[5] then
            redis.call('HDEL', KEYS[5], ARGV[5])
        end
    else
        redis.call('ZREM', KEYS[4], ARGV[5])
        if KEYS[5] then
            redis.call('HDEL', KEYS[5], ARGV[5])
        end
    end
end
if busy then
    return {0, redis.call('PTTL', busy)}
end

local token, text = fence_next(KEYS[2], KEYS[1] .. ':fence', redis.call('TIME'), ARGV[4])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', '1', 'token', text)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}

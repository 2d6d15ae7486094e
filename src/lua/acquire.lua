-- Acquire (or re-enter) a reentrant lock.
--
-- KEYS[1]  lock hash "dlock:{name}": owner, count, token
-- KEYS[2]  fencing counter "dlock:{name}:fence" (never expires)
-- ARGV[1]  owner: "<client id>:<thread number>:<handle number>"
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  holds the caller believes it has (0 for a first acquisition)
-- ARGV[4]  fencing floor: a new token is above it (optional, see lib/fence.lua)
-- KEYS[3]  (optional, with ARGV[5..7]) waiting processes "dlock:{name}:w":
--          sorted set, client id -> the time (ms) it counts as gone
-- ARGV[5]  the caller's client id
-- ARGV[6]  how long a registered process counts as waiting (ms)
-- ARGV[7]  "0": the caller is not waiting (a first attempt); "1": it is
--          its process's only waiter; "2": other threads or acquisitions
--          of its process wait too, so taking the lock keeps the process
--          registered
-- KEYS[4]  (optional) "dlock:{name}:r": the process a release woke, for a
--          few milliseconds (release.lua)
-- KEYS[5]  (optional, with KEYS[3]) "dlock:{name}:o": offers of waiting
--          processes, client id -> "<lease> <floor> <sent> <wait id> <owner>"
-- ARGV[8]  (optional, with KEYS[5] and ARGV[7] "1") the caller's offer: a
--          release may hand it the lock without an attempt of its own
--          (release.lua); <sent> is when the caller sent this attempt, by
--          its own clock
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
-- (KEYS[4]): a newcomer of another process, which would otherwise take it
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

local owner = redis.call('HGET', KEYS[1], 'owner')
local mine = tonumber(ARGV[3])

if owner == ARGV[1] and mine > 0 then
    local count = mine + 1
    redis.call('HSET', KEYS[1], 'count', count)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {2, tonumber(redis.call('HGET', KEYS[1], 'token')), count}
end

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local waiting = KEYS[3] and ARGV[7] and ARGV[7] ~= '0'

local function register()
    if waiting then
        redis.call('ZADD', KEYS[3], now_ms() + tonumber(ARGV[6]), ARGV[5])
        redis.call('PEXPIRE', KEYS[3], ARGV[6])
        if KEYS[5] and ARGV[8] and ARGV[7] == '1' then
            redis.call('HSET', KEYS[5], ARGV[5], ARGV[8])
            redis.call('PEXPIRE', KEYS[5], ARGV[6])
        elseif KEYS[5] then
            redis.call('HDEL', KEYS[5], ARGV[5])
        end
    end
end

if owner and owner ~= ARGV[1] then
    register()
    return {0, redis.call('PTTL', KEYS[1])}
end

if KEYS[4] then
    local woken = redis.call('GET', KEYS[4])
    if woken and woken ~= ARGV[5] then
        register()
        return {0, redis.call('PTTL', KEYS[4])}
    end
    if woken then
        redis.call('DEL', KEYS[4])
    end
end

if waiting then
    if ARGV[7] == '2' then
        register()
    else
        redis.call('ZREM', KEYS[3], ARGV[5])
        if KEYS[5] then
            redis.call('HDEL', KEYS[5], ARGV[5])
        end
    end
end

local token, text = fence_next(KEYS[2], redis.call('TIME'), ARGV[4])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', text)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}

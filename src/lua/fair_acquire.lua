-- Acquire a fair (FIFO) lock, or join its queue.
--
-- KEYS[1]  lock hash "dlock:{name}" (same fields as acquire.lua)
-- KEYS[2]  fencing counter of the name's slot "dlock:fence:{TAG}"
-- KEYS[3]  queue "dlock:{name}:q": waiting owners, oldest first
-- KEYS[4]  "dlock:{name}:qt": sorted set, waiting owner -> deadline (ms)
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  holds the caller believes it has
-- ARGV[4]  waiter timeout in milliseconds
-- ARGV[5]  "1" to join the queue when the lock is not free for us
-- ARGV[6]  channel prefix "dlock:{name}:ch:" (+ owner = a waiter's channel)
-- ARGV[7]  "publish" or "spublish"
-- ARGV[8]  fencing floor (see acquire.lua)
-- KEYS[5]  (optional) "dlock:{name}:qo": offers of queued waiters, owner ->
--          "<lease> <floor> <sent> <wait id> <owner>" (as acquire.lua's)
-- ARGV[9]  (optional, with KEYS[5]) the caller's offer: a release may
--          hand it the lock when it is the queue's head, without an
--          attempt of its own (fair_release.lua)
--
-- Returns {1, token} acquired, {2, token, count} re-entered, or {0, ms}:
-- the longest the caller should sleep before trying again.
--
-- The lock goes to the queue's head only. A waiter proves it is alive by
-- retrying, which pushes its deadline forward; a waiter whose deadline
-- passed (it died, or gave up without saying so) is dropped when it
-- reaches the head, and the next one is woken. So a dead waiter stalls the
-- queue for at most the waiter timeout, and a live one must retry within
-- it: the caller's sleeps are capped at half of it.
--
-- Resend safety: as in acquire.lua, the count is set from ARGV[3], so a
-- resend of a call that took the lock takes that hold once, with a new
-- token; one that queued the caller finds it queued (ZSCORE) and does not
-- queue it twice, only pushes its deadline forward.
--
-- An offer belongs to a place in the queue: a queued attempt with one
-- sets it (the newest attempt's, whose send time is the latest), one
-- without drops it, and it goes whenever its owner leaves the queue: by a
-- grant here, by being dropped as dead, by fair_leave.lua, or by the
-- release that hands it the lock.
--
-- Fencing tokens as in acquire.lua, see lib/fence.lua.
--
-- One NAME, one kind: a NAME held as a read-write lock or used as a
-- semaphore or latch is refused, as in acquire.lua (lib/kinds.lua).

--@include fence
--@include kinds

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, timeout = ARGV[1], tonumber(ARGV[4])

local function unoffer(owner)
    if KEYS[5] then
        redis.call('HDEL', KEYS[5], owner)
    end
end

local function grant()
    unoffer(me)
    local token, text = fence_next(KEYS[2], KEYS[1] .. ':fence', t, ARGV[8])
    redis.call('HSET', KEYS[1], 'owner', me, 'count', 1, 'token', text)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token}
end

local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= me then
    local clash = kinds_clash(KEYS[1], '')
    if clash then
        return clash
    end
end
if owner == me then
    local mine = tonumber(ARGV[3])
    if mine > 0 then
        redis.call('HSET', KEYS[1], 'count', mine + 1)
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
        return {2, tonumber(redis.call('HGET', KEYS[1], 'token')), mine + 1}
    end
    -- Ours on the server, unknown to the caller (see acquire.lua): a new
    -- token, and no queue to wait in for a lock we hold already.
    redis.call('LREM', KEYS[3], 0, me)
    redis.call('ZREM', KEYS[4], me)
    return grant()
end

-- Drop dead waiters from the head; the first live one (or us) stays.
local head, head_deadline
while true do
    head = redis.call('LINDEX', KEYS[3], 0)
    if not head then break end
    head_deadline = tonumber(redis.call('ZSCORE', KEYS[4], head))
    if head == me or (head_deadline and head_deadline > now) then break end
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], head)
    unoffer(head)
end

if not owner and (not head or head == me) then
    if head == me then
        redis.call('LPOP', KEYS[3])
        redis.call('ZREM', KEYS[4], me)
    end
    return grant()
end

local sleep = math.floor(timeout / 2)
if ARGV[5] == '1' then
    if not redis.call('ZSCORE', KEYS[4], me) then
        redis.call('RPUSH', KEYS[3], me)
    end
    redis.call('ZADD', KEYS[4], now + timeout, me)
    redis.call('PEXPIRE', KEYS[3], timeout * 2)
    redis.call('PEXPIRE', KEYS[4], timeout * 2)
    if KEYS[5] and ARGV[9] then
        redis.call('HSET', KEYS[5], me, ARGV[9])
        redis.call('PEXPIRE', KEYS[5], timeout * 2)
    else
        unoffer(me)
    end
end
if owner then
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl >= 0 and ttl < sleep then sleep = ttl end
elseif head and head ~= me then
    -- Free, but the head has not taken it yet: wake it (it may have missed
    -- a message) and wait at most until it would be dropped.
    redis.call(ARGV[7], ARGV[6] .. head, '1')
    if head_deadline - now < sleep then sleep = head_deadline - now end
end
return {0, sleep}

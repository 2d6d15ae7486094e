-- Release one hold of a fair lock and wake the queue's head only.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  queue "dlock:{name}:q"
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, restored while holds remain
-- ARGV[3]  holds the caller has before this release
-- ARGV[4]  "publish" or "spublish"
-- ARGV[5]  channel prefix "dlock:{name}:ch:"
-- KEYS[3]  (optional) the queue's deadlines "dlock:{name}:qt"
-- KEYS[4]  (optional, with KEYS[3]) the slot's fencing counter "dlock:fence:{TAG}"
-- KEYS[5]  (optional, with KEYS[4]) the queued waiters' offers
--          "dlock:{name}:qo" (fair_acquire.lua)
-- ARGV[6..8]  (optional, with KEYS[5]) a waiting thread of the caller's
--          own client to hand the lock to: its owner, lease (ms) and
--          fencing floor (see lib/fence.lua)
--
-- Returns -1 when not the owner (nothing changes), else the holds left.
-- Only the head waiter is woken: the others could not take the lock
-- anyway, so waking them would be a herd for nothing.
--
-- The direct hand-off within the caller's client (ARGV[6..8]): the caller
-- names the thread of its own client that has waited longest, which it
-- keeps asleep until the answer is in (src/lock.c). When that thread is
-- the queue's head, the lock goes to it here, as fair_acquire.lua would
-- grant it (out of the queue, a new token, count 1, its lease), and
-- {-3, token} is returned: the thread wakes holding it, without the
-- message, the wake-up of the subscriber and an attempt of its own. The
-- caller's guess may be wrong (a thread of another process, or another
-- of its own, may be the head); then nothing is handed over and the head
-- is woken as always. The order is the queue's either way. When the reply
-- is lost, the caller wakes the thread it named: its attempt finds itself
-- the owner with no hold it knows of, which fair_acquire.lua grants afresh
-- with a new token.
--
-- The hand-off to the head when it is a thread of another process (or
-- one of the caller's that it did not name), KEYS[5]: a head that offered
-- when it queued (fair_acquire.lua) is granted the lock here the same
-- way, and the message on its own channel says so: "><token> <sent>
-- <wait id> <owner>", as release.lua's to a process (src/subscriber.c
-- gives it to that wait only, and the waiter counts its lease from <sent>,
-- the send time of the attempt that made the offer). Two conditions, both
-- release.lua's for the same reasons: the head's deadline has not passed
-- (a waiter that stopped retrying may be gone), and its own channel has a
-- listener on this server (PUBSUB NUMSUB, SHARDNUMSUB on Cluster: a grant
-- to a waiter whose message could be heard on a replica of this server
-- must never be taken back, so it is not made). A head that fails either
-- is woken as before, and its own attempt decides. A waiter that gives up
-- leaves the queue and takes its offer back in one script, which also
-- gives back a lock handed to it meanwhile (fair_leave.lua), so no
-- hand-off can come after it has looked.
--
-- Resend safety: as in release.lua, the count is set from ARGV[3]; a
-- resend of the last release finds another owner (or none) and returns -1,
-- which the caller that knows it resent reads as done.

if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
    return -1
end
local left = tonumber(ARGV[3]) - 1
if left > 0 then
    redis.call('HSET', KEYS[1], 'count', left)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return left
end
redis.call('DEL', KEYS[1])
local head = redis.call('LINDEX', KEYS[2], 0)
if not head then
    return 0
end

-- The shared functions only now: a local function is made anew on each
-- call that reaches it, and a release with nobody queued needs none.
--@include fence
--@include handoff

-- The head out of the queue and granted the lock, as fair_acquire.lua
-- would grant it; the new token and its text.
local function grant(lease, floor, t)
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], head)
    if KEYS[5] then
        redis.call('HDEL', KEYS[5], head)
    end
    local token, text = fence_next(KEYS[4], KEYS[1] .. ':fence', t, floor)
    redis.call('HSET', KEYS[1], 'owner', head, 'count', 1, 'token', text)
    redis.call('PEXPIRE', KEYS[1], lease)
    return token, text
end

local channel = ARGV[5] .. head
if head == ARGV[6] then
    local token = grant(ARGV[7], ARGV[8], redis.call('TIME'))
    return {-3, token}
end
local offer = KEYS[5] and redis.call('HGET', KEYS[5], head)
if offer then
    local lease, floor, sent, wait, owner = handoff_terms(offer)
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local deadline = tonumber(redis.call('ZSCORE', KEYS[3], head))
    if owner == head and deadline and deadline > now and handoff_listens(ARGV[4], channel) then
        local _, text = grant(lease, floor, t)
        handoff_tell(ARGV[4], channel, text, sent, wait, head)
        return 0
    end
end
redis.call(ARGV[4], channel, '1')
return 0

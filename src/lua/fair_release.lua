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
-- KEYS[4]  (optional, with KEYS[3]) the fencing counter "dlock:{name}:fence"
-- ARGV[6..8]  (optional, with KEYS[4]) a waiting thread of the caller's
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
-- Resend safety: as in release.lua, the count is set from ARGV[3]; a
-- resend of the last release finds another owner (or none) and returns -1,
-- which the caller that knows it resent reads as done.
--@include fence
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
if head and head == ARGV[6] then
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], head)
    local token, text = fence_next(KEYS[4], redis.call('TIME'), ARGV[8])
    redis.call('HSET', KEYS[1], 'owner', head, 'count', 1, 'token', text)
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    return {-3, token}
end
if head then
    redis.call(ARGV[4], ARGV[5] .. head, '1')
end
return 0

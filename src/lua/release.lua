-- Release one hold of a reentrant lock.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  release channel "dlock:{name}:ch"
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, restored while holds remain
-- ARGV[3]  holds the caller has before this release (at least 1)
-- ARGV[4]  "publish", or "spublish" on Redis Cluster
--
-- Returns -1 when ARGV[1] is not the owner (nothing is changed: the hold
-- expired and someone else may own the lock now), else the holds left.
-- The count is set from ARGV[3] rather than decremented so that a resend
-- after a lost reply cannot release twice. When the last hold goes, one
-- waiter per subscribed process is woken through the channel ("1"); a
-- resend of that last release returns -1, which the caller that knows it
-- resent (src/lock.c) reads as done.

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
redis.call(ARGV[4], KEYS[2], '1')
return 0

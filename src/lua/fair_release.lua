-- Release one hold of a fair lock and wake the queue's head only.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  queue "dlock:{name}:q"
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, restored while holds remain
-- ARGV[3]  holds the caller has before this release
-- ARGV[4]  "publish" or "spublish"
-- ARGV[5]  channel prefix "dlock:{name}:ch:"
--
-- Returns -1 when not the owner (nothing changes), else the holds left.
-- Only the head waiter is woken: the others could not take the lock
-- anyway, so waking them would be a herd for nothing.
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
if head then
    redis.call(ARGV[4], ARGV[5] .. head, '1')
end
return 0

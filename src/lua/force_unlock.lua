-- Delete a lock whoever holds it (operators only) and wake a waiter.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  release channel "dlock:{name}:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  "publish", or "spublish" on Redis Cluster
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
--
-- Returns 1 when a lock was deleted, else 0. The holder's watchdog finds
-- the lock gone at its next renewal and reports it lost.
--
-- Resend safety: a resend after a lost reply would answer 0 to the call
-- that did delete the lock, or delete the lock of a holder that took it in
-- between; the record keeps the first run's answer and does neither.

local done = redis.call('GET', KEYS[3])
if done and string.match(done, '^(%d+):') == ARGV[2] then
    return 1
end
if redis.call('DEL', KEYS[1]) == 1 then
    redis.call(ARGV[1], KEYS[2], '1')
    redis.call('SET', KEYS[3], ARGV[2] .. ':1', 'PX', ARGV[3])
    return 1
end
return 0

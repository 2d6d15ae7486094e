-- Delete a lock whoever holds it (operators only) and wake its waiters.
-- Serves the plain and fair lock ("dlock:{name}") and the read-write lock
-- ("dlock:{name}:rw") alike: each keeps all its holds in one hash.
--
-- KEYS[1]  lock hash "dlock:{name}" or "dlock:{name}:rw"
-- KEYS[2]  its release channel "dlock:{name}:ch" or "dlock:{name}:rw:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  "publish", or "spublish" on Redis Cluster
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
-- ARGV[4]  the wake-up message: "1" (one waiter per process) or "*" (all)
-- KEYS[4]  (optional) a plain lock's waiting processes "dlock:{name}:w":
--          each is woken on its own channel KEYS[2]:<client id> too
--
-- Returns 1 when a lock was deleted, else 0. The holder's watchdog finds
-- the lock gone at its next renewal and reports it lost.
--
-- Resend safety: a resend after a lost reply would answer 0 to the call
-- that did delete the lock, or delete the lock of a holder that took it in
-- between; the record keeps the first run's answer and does neither
-- (lib/op_record.lua).

--@include op_record

if op_replay(KEYS[3], ARGV[2]) then
    return 1
end
if redis.call('DEL', KEYS[1]) == 1 then
    redis.call(ARGV[1], KEYS[2], ARGV[4])
    if KEYS[4] then
        for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
            redis.call(ARGV[1], KEYS[2] .. ':' .. id, ARGV[4])
        end
    end
    op_record(KEYS[3], ARGV[2], 1, ARGV[3])
    return 1
end
return 0

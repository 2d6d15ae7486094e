-- Delete a lock whoever holds it (operators only) and wake a waiter.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  release channel "dlock:{name}:ch"
-- ARGV[1]  "publish", or "spublish" on Redis Cluster
--
-- Returns 1 when a lock was deleted, else 0. The holder's watchdog finds
-- the lock gone at its next renewal and reports it lost.

if redis.call('DEL', KEYS[1]) == 1 then
    redis.call(ARGV[1], KEYS[2], '1')
    return 1
end
return 0

-- Return one permit of a permit-expirable semaphore by its id.
--
-- KEYS[1]  "dlock:{name}:psem:held"
-- KEYS[2]  channel "dlock:{name}:psem:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  permit id
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  this call's operation sequence number
-- ARGV[4]  the record's lifetime in milliseconds
--
-- Returns 1 when released, 0 when no such permit is held (it expired and
-- was reclaimed, or the id is wrong): then nothing changes.
--
-- Resend safety: removing a permit twice cannot return two places, but a
-- resend after a lost reply would find the permit gone and tell the
-- releaser it had expired; the record keeps the first run's answer.

local done = redis.call('GET', KEYS[3])
if done and string.match(done, '^(%d+):') == ARGV[3] then
    return 1
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], '1')
    redis.call('SET', KEYS[3], ARGV[3] .. ':1', 'PX', ARGV[4])
    return 1
end
return 0

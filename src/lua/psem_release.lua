-- Return one permit of a permit-expirable semaphore by its id.
--
-- KEYS[1]  "dlock:{name}:psem:held"
-- KEYS[2]  channel "dlock:{name}:psem:ch"
-- ARGV[1]  permit id
-- ARGV[2]  "publish" or "spublish"
--
-- Returns 1 when released, 0 when no such permit is held (it expired and
-- was reclaimed, or the id is wrong): then nothing changes.

if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], '1')
    return 1
end
return 0

-- Count a latch down by one; at zero, open it and wake every waiter.
--
-- KEYS[1]  "dlock:{name}:latch": the count, or "0" once open
-- KEYS[2]  channel "dlock:{name}:latch:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  "publish" or "spublish"
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
-- ARGV[4]  how long an open latch is kept (ms, DLOCK_IDLE_MS)
--
-- Returns the count left. Counting down a latch that is not set (never
-- set, or already open) changes nothing and returns 0.
--
-- An open latch is kept as "0" for ARGV[4], not deleted: an await that
-- comes after the last count-down must tell it from a latch never set,
-- which it waits for (latch_count.lua).
--
-- One NAME, one kind: a NAME that is a lock or a semaphore is refused
-- (lib/kinds.lua).
--
-- Resend safety: the same call sent again after its reply was lost finds
-- its record and returns the first run's answer instead of counting down
-- twice, which could open the latch one party early (lib/op_record.lua).

--@include op_record
--@include kinds

local recorded = op_replay(KEYS[3], ARGV[2])
if recorded then
    return recorded
end
local clash = kinds_clash(string.sub(KEYS[1], 1, -7), ':latch')
if clash then
    return clash
end
local n = redis.call('GET', KEYS[1])
if not n or n == '0' then
    return 0
end
local left = redis.call('DECR', KEYS[1])
if left <= 0 then
    redis.call('SET', KEYS[1], '0', 'PX', ARGV[4])
    redis.call(ARGV[1], KEYS[2], '*')
    left = 0
end
op_record(KEYS[3], ARGV[2], left, ARGV[3])
return left

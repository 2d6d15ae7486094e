-- Count a latch down by one; at zero, delete it and wake every waiter.
--
-- KEYS[1]  "dlock:{name}:latch": the count
-- KEYS[2]  channel "dlock:{name}:latch:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  "publish" or "spublish"
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
--
-- Returns the count left. Counting down a latch that is not set (never
-- set, or already open) changes nothing and returns 0.
--
-- Resend safety: the same call sent again after its reply was lost finds
-- its record and returns the first run's answer instead of counting down
-- twice, which could open the latch one party early (lib/op_record.lua).

--@include op_record

local recorded = op_replay(KEYS[3], ARGV[2])
if recorded then
    return recorded
end
if redis.call('EXISTS', KEYS[1]) == 0 then
    return 0
end
local left = redis.call('DECR', KEYS[1])
if left <= 0 then
    redis.call('DEL', KEYS[1])
    redis.call(ARGV[1], KEYS[2], '*')
    left = 0
end
op_record(KEYS[3], ARGV[2], left, ARGV[3])
return left

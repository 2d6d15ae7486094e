-- Set a latch's count if it is not shut already.
--
-- KEYS[1]  "dlock:{name}:latch": the count, or "0" once open
-- KEYS[2]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  the count (>= 1)
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
--
-- Returns 1 when set, 0 when it was shut already (its count is kept).
-- Setting only a latch that is not shut lets every process of a fleet
-- call it at start-up; an open latch ("0", latch_count_down.lua) may be
-- set again. A shut latch has no expiry: its count is what its awaiters
-- wait on (docs/design/keys.md).
--
-- One NAME, one kind: a NAME that is a lock or a semaphore is refused
-- (lib/kinds.lua).
--
-- Resend safety: a resend after a lost reply would answer 0 to the
-- caller that did set it; the record keeps the first run's answer
-- (lib/op_record.lua).

--@include op_record
--@include kinds

if op_replay(KEYS[2], ARGV[2]) then
    return 1
end
local clash = kinds_clash(string.sub(KEYS[1], 1, -7), ':latch')
if clash then
    return clash
end
local n = redis.call('GET', KEYS[1])
if n and n ~= '0' then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1])
op_record(KEYS[2], ARGV[2], 1, ARGV[3])
return 1

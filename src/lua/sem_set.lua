-- Set a counter (semaphore permits, latch count) only if it is unset.
--
-- KEYS[1]  the counter
-- KEYS[2]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  the value
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
--
-- Returns 1 when set, 0 when it already existed. Setting only once lets
-- every process of a fleet call it at start-up without resetting a
-- semaphore that others are using.
--
-- Resend safety: SET NX never sets twice, but a resend after a lost reply
-- would answer 0 to the caller that did set it; the record keeps the
-- first run's answer (lib/op_record.lua).

--@include op_record

if op_replay(KEYS[2], ARGV[2]) then
    return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    op_record(KEYS[2], ARGV[2], 1, ARGV[3])
    return 1
end
return 0

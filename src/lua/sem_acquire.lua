-- Take permits from a semaphore.
--
-- KEYS[1]  "dlock:{name}:sem": permits available (missing = 0)
-- KEYS[2]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  permits wanted (>= 1)
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
--
-- Returns 1 when taken, 0 when too few are available. All or nothing: a
-- caller wanting 3 never holds 1 or 2 of them while it waits, so two
-- callers each wanting most of the permits cannot starve each other.
--
-- Resend safety: a run that took permits records it; the same call sent
-- again after its reply was lost finds the record and answers 1 without
-- taking more. A run that took nothing records nothing: running it again
-- is harmless (lib/op_record.lua).

--@include op_record

if op_replay(KEYS[2], ARGV[2]) then
    return 1
end
local available = tonumber(redis.call('GET', KEYS[1])) or 0
local wanted = tonumber(ARGV[1])
if available >= wanted then
    redis.call('DECRBY', KEYS[1], wanted)
    op_record(KEYS[2], ARGV[2], 1, ARGV[3])
    return 1
end
return 0

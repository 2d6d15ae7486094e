-- Take permits from a semaphore.
--
-- KEYS[1]  "dlock:{name}:sem": permits available (missing = 0)
-- KEYS[2]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- KEYS[3]  "dlock:{name}:sem:size": the permits it was made with
-- ARGV[1]  permits wanted (>= 1)
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
-- ARGV[4]  how long an idle semaphore is kept (ms, DLOCK_IDLE_MS)
-- ARGV[5]  (optional) the size the caller's handle was opened with: a
--          semaphore that is gone (it expired idle) is made anew at it
--
-- Returns 1 when taken, 0 when too few are available. All or nothing: a
-- caller wanting 3 never holds 1 or 2 of them while it waits, so two
-- callers each wanting most of the permits cannot starve each other.
--
-- Idle keys: a semaphore at its full size holds nothing anyone depends
-- on, so its two keys expire after ARGV[4] (sem_set.lua, sem_release.lua);
-- the acquire that takes it below its size keeps them (PERSIST), since a
-- plain semaphore's permits have no lease to bound how long they are out.
--
-- One NAME, one kind: a NAME that is a lock, a permit-expirable
-- semaphore or a latch is refused (lib/kinds.lua).
--
-- Resend safety: a run that took permits records it; the same call sent
-- again after its reply was lost finds the record and answers 1 without
-- taking more. A run that took nothing records nothing: running it again
-- is harmless (lib/op_record.lua).

--@include op_record
--@include kinds

if op_replay(KEYS[2], ARGV[2]) then
    return 1
end
local clash = kinds_clash(string.sub(KEYS[1], 1, -5), ':sem')
if clash then
    return clash
end
local available = tonumber(redis.call('GET', KEYS[1]))
local size = tonumber(redis.call('GET', KEYS[3]))
if not available and ARGV[5] then
    available, size = tonumber(ARGV[5]), tonumber(ARGV[5])
    redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[4])
    redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[4])
end
available = available or 0
local wanted = tonumber(ARGV[1])
if available >= wanted then
    redis.call('DECRBY', KEYS[1], wanted)
    if size and available >= size then
        redis.call('PERSIST', KEYS[1])
        redis.call('PERSIST', KEYS[3])
    end
    op_record(KEYS[2], ARGV[2], 1, ARGV[3])
    return 1
end
return 0

-- Return permits to a semaphore and wake as many waiters.
--
-- KEYS[1]  "dlock:{name}:sem"
-- KEYS[2]  channel "dlock:{name}:sem:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- ARGV[1]  permits returned (>= 1)
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  this call's operation sequence number
-- ARGV[4]  the record's lifetime in milliseconds
--
-- Returns the permits now available. A plain semaphore has no owners:
-- anyone may release, and a holder that crashes never gives its permits
-- back. The permit-expirable semaphore exists for that case.
--
-- Resend safety: the same call sent again after its reply was lost finds
-- its record and returns the first run's answer without adding permits a
-- second time (lib/op_record.lua).

--@include op_record

local recorded = op_replay(KEYS[3], ARGV[3])
if recorded then
    return recorded
end
local available = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
op_record(KEYS[3], ARGV[3], available, ARGV[4])
return available

-- Return permits to a semaphore and wake as many waiters.
--
-- KEYS[1]  "dlock:{name}:sem"
-- KEYS[2]  channel "dlock:{name}:sem:ch"
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- KEYS[4]  "dlock:{name}:sem:size" (sem_acquire.lua)
-- ARGV[1]  permits returned (>= 1)
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  this call's operation sequence number
-- ARGV[4]  the record's lifetime in milliseconds
-- ARGV[5]  how long an idle semaphore is kept (ms, DLOCK_IDLE_MS)
--
-- Returns the permits now available. A plain semaphore has no owners:
-- anyone may release, and a holder that crashes never gives its permits
-- back. The permit-expirable semaphore exists for that case.
--
-- The release that brings the semaphore back to its full size starts
-- its keys' idle expiry (sem_acquire.lua). A semaphore without a size
-- (made by an older version, or by releases alone) keeps no expiry.
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
local size = tonumber(redis.call('GET', KEYS[4]))
if size and available >= size then
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
op_record(KEYS[3], ARGV[3], available, ARGV[4])
return available

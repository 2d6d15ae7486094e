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
-- Returns 1 when released, 0 when no live permit has that id: it expired
-- (reclaimed or not yet: either way its place was free to take once its
-- lease passed, so the releaser must hear it was lost), or the id is
-- wrong. An expired permit found here is removed as acquire would.
--
-- Resend safety: removing a permit twice cannot return two places, but a
-- resend after a lost reply would find the permit gone and tell the
-- releaser it had expired; the record keeps the first run's answer
-- (lib/op_record.lua).

--@include op_record

if op_replay(KEYS[3], ARGV[3]) then
    return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not expiry then
    return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], '1')
if expiry <= now then
    return 0
end
op_record(KEYS[3], ARGV[3], 1, ARGV[4])
return 1

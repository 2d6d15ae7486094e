-- Make a semaphore of a size, or change its size.
--
-- KEYS[1]  "dlock:{name}:sem": permits available
-- KEYS[2]  "dlock:{name}:sem:size": the permits it was made with
-- KEYS[3]  operation record "dlock:{name}:op:<client id>:<thread>" (src/op.c)
-- KEYS[4]  channel "dlock:{name}:sem:ch"
-- ARGV[1]  the size (ARGV[5] "set", "resize") or the change ("add")
-- ARGV[2]  this call's operation sequence number
-- ARGV[3]  the record's lifetime in milliseconds
-- ARGV[4]  how long an idle semaphore is kept (ms, DLOCK_IDLE_MS)
-- ARGV[5]  "set": make it only if it is not there, and refuse a size
--          other than the stored one; "resize": make it or set its size,
--          the permits available moving by as much as the size does;
--          "add": as "resize" to the stored size plus ARGV[1]
-- ARGV[6]  "publish" or "spublish"
--
-- Returns {1, size} when made or changed, {0, size} when "set" found it
-- at that size already, or {-1, size} when "set" found another size or
-- "add" would take it below 0 (nothing is changed).
--
-- Why "set" refuses another size: every process of a fleet calls it at
-- start-up, and one started with a different size would otherwise work
-- on believing in permits that are not there. Resizing is asked for by
-- name. Permits taken beyond a shrunk size are not taken back: the
-- available count goes below zero and acquires wait until enough are
-- returned.
--
-- Idle keys: at its full size the semaphore expires after ARGV[4]
-- (sem_acquire.lua); below it, it is kept.
--
-- Resend safety: a resend after a lost reply would answer 0 to the
-- caller that made it, or resize twice; the record keeps the first run's
-- size (lib/op_record.lua).

--@include op_record
--@include kinds
--@include sem_size

local recorded = op_replay(KEYS[3], ARGV[2])
if recorded then
    return {1, recorded}
end
local clash = kinds_clash(string.sub(KEYS[1], 1, -5), ':sem')
if clash then
    return clash
end
local n, mode = tonumber(ARGV[1]), ARGV[5]
local available = tonumber(redis.call('GET', KEYS[1]))
local size = tonumber(redis.call('GET', KEYS[2]))
if available and not size then
    -- made without a size: by an older version, or by releases alone;
    -- the permits available then stand for its size
    size = available
end
local new, unchanged = sem_size_new(size, n, mode)
if not new then
    return unchanged
end
available = (available or 0) + new - (size or 0)
redis.call('SET', KEYS[1], available)
redis.call('SET', KEYS[2], new)
if available >= new then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
if new > (size or 0) then
    redis.call(ARGV[6], KEYS[4], new - (size or 0))
end
op_record(KEYS[3], ARGV[2], new, ARGV[3])
return {1, new}

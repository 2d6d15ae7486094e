-- Permits of a permit-expirable semaphore not held by a live permit.
--
-- KEYS[1]  "dlock:{name}:psem"
-- KEYS[2]  "dlock:{name}:psem:held"
-- ARGV[1]  (optional) the number of permits the caller's handle was
--          opened with, for a semaphore whose key expired idle
--
-- Read-only (so safe to resend): expired permits count as available
-- without being removed.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local permits = tonumber(redis.call('GET', KEYS[1])) or tonumber(ARGV[1]) or 0
return permits - redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')

-- Read a permit-expirable semaphore in one atomic step, for the admin view.
--
-- KEYS[1]  "dlock:{name}:psem": the number of permits
-- KEYS[2]  "dlock:{name}:psem:held": permit id -> expiry (ms, server time)
--
-- Returns {permits or -1 when not set, live permits, longest lease left
-- in ms or -1}. Expired permits count as free without being removed, as
-- in psem_available.lua. Read-only, so safe to resend.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local permits = tonumber(redis.call('GET', KEYS[1])) or -1
local used = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
local ttl = -1
if used > 0 then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    ttl = tonumber(last[2]) - now
end
return {permits, used, ttl}

-- Renew read holds (the watchdog's batch).
--
-- KEYS[i]     "dlock:{name}:rw" of the i-th hold
-- ARGV[2i-1]  its owner
-- ARGV[2i]    its new lease in milliseconds
--
-- Returns 1 per renewed hold, 0 per hold that had expired (never revived:
-- a writer may have taken the lock since). Resend safety: renewing twice
-- sets the same expiry again.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = {}
for i, key in ipairs(KEYS) do
    local owner, lease = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
    local e = tonumber(redis.call('HGET', key, 'e:' .. owner))
    if e and e > now then
        redis.call('HSET', key, 'e:' .. owner, now + lease)
        if redis.call('PTTL', key) < lease then
            redis.call('PEXPIRE', key, lease)
        end
        result[i] = 1
    else
        result[i] = 0
    end
end
return result

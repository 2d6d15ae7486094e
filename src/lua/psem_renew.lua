-- Renew the leases of permits (the watchdog's batch, or one explicit call).
--
-- KEYS[i]     "dlock:{name}:psem:held" of the i-th permit
-- ARGV[2i-1]  its permit id
-- ARGV[2i]    its new lease in milliseconds
--
-- Returns one integer per key: 1 renewed, 0 no longer held (it expired, so
-- another process may hold that permit now: the caller reports it lost).
-- An expired permit is never revived, even if no one reclaimed it yet.
-- Resend safety: renewing twice sets the same expiry again.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = {}
for i, key in ipairs(KEYS) do
    local expiry = tonumber(redis.call('ZSCORE', key, ARGV[2 * i - 1]))
    if expiry and expiry > now then
        redis.call('ZADD', key, now + tonumber(ARGV[2 * i]), ARGV[2 * i - 1])
        local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
        redis.call('PEXPIREAT', key, last[2])
        -- the number of permits outlives every lease (psem_acquire.lua):
        -- its key is this one's without ":held", in the same slot
        local size = string.sub(key, 1, -6)
        local ttl = redis.call('PTTL', size)
        if ttl >= 0 and ttl < tonumber(ARGV[2 * i]) then
            redis.call('PEXPIREAT', size, last[2])
        end
        result[i] = 1
    else
        result[i] = 0
    end
end
return result

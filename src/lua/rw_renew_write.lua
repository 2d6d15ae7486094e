-- Renew write holds (the watchdog's batch).
--
-- KEYS[i]     "dlock:{name}:rw" of the i-th hold
-- ARGV[2i-1]  its owner
-- ARGV[2i]    its new lease in milliseconds
--
-- Returns 1 per renewed hold, 0 per hold no longer owned. The TTL is only
-- ever raised: it may also be carrying the same owner's read hold.
-- Resend safety: renewing twice sets the same lease again.

local result = {}
for i, key in ipairs(KEYS) do
    local lease = tonumber(ARGV[2 * i])
    if redis.call('HGET', key, 'writer') == ARGV[2 * i - 1] then
        if redis.call('PTTL', key) < lease then
            redis.call('PEXPIRE', key, lease)
        end
        result[i] = 1
    else
        result[i] = 0
    end
end
return result

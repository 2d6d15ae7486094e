-- Renew the leases of many locks at once (the watchdog's batch).
--
-- KEYS[i]      lock hash of the i-th lock
-- ARGV[2i-1]   its owner
-- ARGV[2i]     its new lease in milliseconds
--
-- Returns one integer per key: 1 renewed, 0 no longer owned (expired,
-- deleted by force, or taken by another owner): the caller reports it lost.
-- Only the owner's lock is touched, so a late renewal can never extend a
-- lock that has passed to someone else. Resend safety: renewing twice
-- sets the same lease again.

local result = {}
for i, key in ipairs(KEYS) do
    if redis.call('HGET', key, 'owner') == ARGV[2 * i - 1] then
        redis.call('PEXPIRE', key, ARGV[2 * i])
        result[i] = 1
    else
        result[i] = 0
    end
end
return result

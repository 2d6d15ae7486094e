-- A waiter stops waiting for a plain lock. When it was its process's last
-- waiter, the process leaves the set of waiting processes, so that no
-- release wakes it in vain (acquire.lua); a waiter that made an offer
-- (acquire.lua) takes it back, so that no release hands it the lock from
-- now on.
--
-- KEYS[1]  waiting processes "dlock:{name}:w"
-- ARGV[1]  the client id
-- KEYS[2]  (optional) offers "dlock:{name}:o"
-- ARGV[2]  (optional) "0": other waiters of the process wait on (it stays
--          registered); else it leaves
-- ARGV[3]  (optional, with KEYS[2]) the waiter's owner: its offer is
--          dropped even when its process stays
--
-- Returns 1 when the process was there and left, else 0. Safe to run
-- twice.

local left = 0
if ARGV[2] ~= '0' then
    left = redis.call('ZREM', KEYS[1], ARGV[1])
    if KEYS[2] then
        redis.call('HDEL', KEYS[2], ARGV[1])
    end
elseif KEYS[2] and ARGV[3] then
    local offer = redis.call('HGET', KEYS[2], ARGV[1])
    if offer and string.sub(offer, -(#ARGV[3] + 1)) == ' ' .. ARGV[3] then
        redis.call('HDEL', KEYS[2], ARGV[1])
    end
end
return left

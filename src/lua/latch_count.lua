-- The count of a latch, as dlock_latch_count() reads it with GET: the
-- attempt of an asynchronous await, where every attempt is a script call
-- on the shared connection.
--
-- KEYS[1]  "dlock:{name}:latch": the count
--
-- Returns the count; 0 when the latch is not set (never set, or open).

local n = redis.call('GET', KEYS[1])
if not n then
    return 0
end
return tonumber(n)

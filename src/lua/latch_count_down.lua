-- Count a latch down by one; at zero, delete it and wake every waiter.
--
-- KEYS[1]  "dlock:{name}:latch": the count
-- KEYS[2]  channel "dlock:{name}:latch:ch"
-- ARGV[1]  "publish" or "spublish"
--
-- Returns the count left. Counting down a latch that is not set (never
-- set, or already open) changes nothing and returns 0.

if redis.call('EXISTS', KEYS[1]) == 0 then
    return 0
end
local left = redis.call('DECR', KEYS[1])
if left <= 0 then
    redis.call('DEL', KEYS[1])
    redis.call(ARGV[1], KEYS[2], '*')
    return 0
end
return left

-- Store a rate limit's settings, or check them against the stored ones.
--
-- KEYS[1]  the limit's settings "dlock:{name}:rate": hash rate, interval
--          (ms), burst
-- KEYS[2]  channel "dlock:{name}:rate:ch"
-- ARGV[1..3]  rate, interval, burst
-- ARGV[4]  "1": replace settings that differ; "0": refuse them
-- ARGV[5]  "publish" or "spublish"
--
-- Returns {how, rate, interval, burst}: how 1 when stored now (the limit
-- had none), 0 when the same were stored already, -1 when others are
-- stored (refused; the stored ones follow), 2 when others were replaced
-- (the old ones follow). A change wakes every waiter of the limit ("*"):
-- its next permit may be due sooner (or later) than it sleeps for.
--
-- The buckets are kept: TAT is a time, which means the same under the
-- new settings; rate_acquire.lua caps one deeper than the new burst.
-- Running twice (a resend) answers 0 the second time, harmless.

local s = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'burst')
local rate, interval, burst = tonumber(s[1]), tonumber(s[2]), tonumber(s[3])
if not (rate and interval and burst) then
    redis.call('HSET', KEYS[1], 'rate', ARGV[1], 'interval', ARGV[2], 'burst', ARGV[3])
    return {1, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}
end
if rate == tonumber(ARGV[1]) and interval == tonumber(ARGV[2]) and burst == tonumber(ARGV[3]) then
    return {0, rate, interval, burst}
end
if ARGV[4] ~= '1' then
    return {-1, rate, interval, burst}
end
redis.call('HSET', KEYS[1], 'rate', ARGV[1], 'interval', ARGV[2], 'burst', ARGV[3])
redis.call(ARGV[5], KEYS[2], '*')
return {2, rate, interval, burst}

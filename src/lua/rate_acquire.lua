-- Take permits from a rate limit, or only look (GCRA, the generic cell
-- rate algorithm; docs/design/rate.md).
--
-- KEYS[1]  the limit's settings "dlock:{name}:rate": hash rate, interval
--          (ms), burst; never expires
-- KEYS[2]  the bucket "dlock:{name}:rate:tat" (the whole limit) or
--          "dlock:{name}:rate:tat:<subject>": "<tat us> <remainder>",
--          expiring when the bucket is full again
-- ARGV[1]  permits wanted (>= 1)
-- ARGV[2]  "1": take them when allowed; "0": only report
-- ARGV[3..5]  the caller's rate, interval and burst: written only when
--          the limit has no settings stored (a server that lost them)
--
-- Returns {allowed, remaining, retry_ms, full_ms, rate, interval, burst}:
-- allowed 1 when the permits were granted (or, looking, would be);
-- remaining, the permits that could be taken right after this call;
-- retry_ms, in how many milliseconds (rounded up) `permits` will be
-- allowed (0: now; -1: never, more than the burst); full_ms, until the
-- bucket is full again; then the settings as stored, which every client
-- follows.
--
-- The bucket is one number, the theoretical arrival time (TAT): with T =
-- interval / rate, the time one permit stands for, taking n permits moves
-- TAT = max(TAT, now) + n*T, and is allowed while TAT - now <= burst*T.
-- T need not be a whole microsecond: TAT is kept as whole microseconds
-- plus a remainder in 1/rate microseconds, so no rounding ever adds up,
-- at any rate. The bucket's key expires when TAT falls back to now: a
-- missing key is a full bucket, so a subject seen once leaves nothing.
-- Time is the server's (TIME), one clock for every client; scripts are
-- replicated by their effects, so replicas store the result, not TIME.
--
-- A resend after a lost reply may take the permits twice: the caller is
-- then told of one grant, so a resend can only admit less, never more.

local s = redis.call('HMGET', KEYS[1], 'rate', 'interval', 'burst')
local rate, interval, burst = tonumber(s[1]), tonumber(s[2]), tonumber(s[3])
if not (rate and interval and burst) then
    rate, interval, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
    redis.call('HSET', KEYS[1], 'rate', rate, 'interval', interval, 'burst', burst)
end
local n = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local iu = interval * 1000 -- T = iu / rate microseconds

-- ceil(a / b) for whole a >= 0, b > 0, exactly (a float division could
-- round a quotient just above a whole number down to it).
local function ceil_div(a, b)
    local r = math.fmod(a, b)
    local q = (a - r) / b
    if r > 0 then q = q + 1 end
    return q
end

-- The bucket: TAT = tat + rem/rate microseconds, never before now, and
-- never more than a whole burst ahead (a burst or rate lowered since it
-- was written: the bucket is then empty, not deeper than it can be).
-- A bucket so capped is written back at once, so that it drains from
-- then on (capped at every call, it would stay a burst ahead forever).
local tat, rem = now, 0
local v = redis.call('GET', KEYS[2])
if v then
    local a, b = string.match(v, '^(%d+) (%d+)$')
    a, b = tonumber(a), tonumber(b)
    if a and b and a >= now then
        tat, rem = a, b
        local most = ceil_div(burst * iu, rate)
        if tat - now > most or (tat - now == most and rem > 0) then
            tat, rem = now + most, 0
            redis.call('SET', KEYS[2], string.format('%.0f 0', tat), 'PX', math.max(1, ceil_div(most, 1000)))
        end
    end
end

-- The debt TAT - now, in 1/rate microseconds, and how it would stand
-- after n permits.
local debt = (tat - now) * rate + rem
local full = burst * iu
local function reply(allowed, after, retry)
    local left = math.floor((full - after) / iu)
    if left < 0 then left = 0 end
    return {allowed, left, retry, ceil_div(after, rate * 1000), rate, interval, burst}
end
if n > burst then
    return reply(0, debt, -1)
end
local after = debt + n * iu
if after > full then
    return reply(0, debt, ceil_div(after - full, rate * 1000))
end
if ARGV[2] ~= '1' then
    return reply(1, debt, 0)
end
local r = math.fmod(after, rate)
local q = (after - r) / rate
-- '%.0f': a number this large would be written as 1.7e+15 by '..'.
redis.call('SET', KEYS[2], string.format('%.0f %.0f', now + q, r), 'PX', math.max(1, ceil_div(after, rate * 1000)))
return reply(1, after, 0)

-- Fencing tokens (lib/fence.lua, pasted into a script by
-- cmake/embed_lua.cmake at a "--@include fence" line).
--
-- Each exclusive hold (a lock, a write hold) gets a token from a counter
-- key of its own that never expires ("dlock:{name}:fence",
-- "dlock:{name}:rw:fence"): max(last + 1, server time in microseconds,
-- caller's floor + 1).
--
-- The counter alone restarts at 1 after a restart without persistence, or
-- goes back after a failover to a replica that missed the last write. Two
-- floors keep tokens rising across both:
--  - the server clock in microseconds, as long as it does not step back
--    and fewer than a million acquisitions a second are made on one name;
--  - the caller's floor: the highest token the calling client has seen
--    for this name, or one the caller passed in (a fenced resource knows
--    the highest token it accepted), so a clock stepped back does not
--    matter to anyone who saw a token before.
-- Doubles hold integers exactly to 2^53, far above microseconds since 1970.

-- Take the next token from the counter at fence_key; `t` is the reply of
-- TIME, `floor` the caller's floor (a decimal string; nil or "" for none).
-- Returns the token and its decimal text (what the counter and the hold's
-- hash store: a plain tostring would print a double as 1.7e+15).
local function fence_next(fence_key, t, floor)
    local token = (tonumber(redis.call('GET', fence_key)) or 0) + 1
    local micros = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if micros > token then
        token = micros
    end
    local above = (tonumber(floor) or 0) + 1
    if above > token then
        token = above
    end
    local text = string.format('%.0f', token)
    redis.call('SET', fence_key, text)
    return token, text
end

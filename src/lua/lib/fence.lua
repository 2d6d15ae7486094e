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
--
-- Why it is written this way (it runs on every exclusive grant, and the
-- server's time per grant is what bounds a busy client): the candidate is
-- the clock's microseconds, whose text is TIME's two fields joined, and
-- it is written with SET ... GET, which answers the old value in the same
-- call. Only when the old value (or the floor) is not below the candidate
-- is the text printed from a number and written once more. So a grant
-- makes one call to the counter, not a GET and a SET, and neither parses
-- nor prints a sixteen-digit number; measured, about 3 µs of the
-- server's 40 µs for an acquire and release (measured; CHANGELOG.md).
-- Decimal texts are compared by length, then as strings: the counter
-- and the floors are written without leading zeros. SET ... GET needs
-- Redis 6.2; before 7.0 (no redis.REDIS_VERSION_NUM) the counter is read
-- with GET and written with SET, as it always was.
local function fence_next(fence_key, t, floor)
    local us = t[2]
    local text = t[1] .. string.rep('0', 6 - #us) .. us
    local token = tonumber(t[1]) * 1000000 + tonumber(us)
    local f = floor and not (#floor < #text or (#floor == #text and floor < text)) and tonumber(floor)
    if f then
        token = f + 1
        text = string.format('%.0f', token)
    end
    local set_get = redis.REDIS_VERSION_NUM ~= nil
    local last
    if set_get then
        last = redis.call('SET', fence_key, text, 'GET')
    else
        last = redis.call('GET', fence_key)
    end
    local l = last and not (#last < #text or (#last == #text and last < text)) and tonumber(last)
    if l then
        token = l + 1
        text = string.format('%.0f', token)
        redis.call('SET', fence_key, text)
    elseif not set_get then
        redis.call('SET', fence_key, text)
    end
    return token, text
end

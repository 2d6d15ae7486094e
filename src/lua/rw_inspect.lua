-- Read a read-write lock's state in one atomic step, for the admin view.
--
-- KEYS[1]  "dlock:{name}:rw" (see rw_acquire.lua)
-- KEYS[2]  fencing counter of the name's slot "dlock:fence:{TAG}"
--
-- Returns {writer or "", write count, live readers, pttl, token}: the
-- write hold's token while there is one, else the counter's last token
-- (at least this name's last write token, see lib/fence.lua) or "0".
-- Readers whose expiry has passed are not counted (they hold nothing,
-- though rw_acquire.lua has not purged them yet). Read-only, so safe to
-- resend.

--@include fence

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = redis.call('HGETALL', KEYS[1])
local writer, wcount, readers, token = '', 0, 0, nil
for i = 1, #fields, 2 do
    local f = fields[i]
    if f == 'writer' then
        writer = fields[i + 1]
    elseif f == 'token' then
        token = fields[i + 1]
    elseif f == 'wcount' then
        wcount = tonumber(fields[i + 1])
    elseif string.sub(f, 1, 2) == 'e:' and tonumber(fields[i + 1]) > now then
        readers = readers + 1
    end
end
if writer == '' or not token then
    token = fence_last(KEYS[2], KEYS[1] .. ':fence')
end
return {writer, wcount, readers, redis.call('PTTL', KEYS[1]), token}

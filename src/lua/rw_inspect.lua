-- Read a read-write lock's state in one atomic step, for the admin view.
--
-- KEYS[1]  "dlock:{name}:rw" (see rw_acquire.lua)
-- KEYS[2]  its fencing counter "dlock:{name}:rw:fence"
--
-- Returns {writer or "", write count, live readers, pttl, last token or
-- "0"}. Readers whose expiry has passed are not counted (they hold
-- nothing, though rw_acquire.lua has not purged them yet). Read-only, so
-- safe to resend.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fields = redis.call('HGETALL', KEYS[1])
local writer, wcount, readers = '', 0, 0
for i = 1, #fields, 2 do
    local f = fields[i]
    if f == 'writer' then
        writer = fields[i + 1]
    elseif f == 'wcount' then
        wcount = tonumber(fields[i + 1])
    elseif string.sub(f, 1, 2) == 'e:' and tonumber(fields[i + 1]) > now then
        readers = readers + 1
    end
end
return {writer, wcount, readers, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0'}

-- Fencing tokens (lib/fence.lua, pasted into a script by
-- cmake/embed_lua.cmake at a "--@include fence" line).
--
-- Each exclusive hold (a lock, a write hold) gets a token from a counter
-- key of its own that never expires ("dlock:{name}:fence",
-- "dlock:{name}:rw:fence"): max(last + 1, server time in microseconds).
-- The counter alone would restart at 1 after a restart without
-- persistence, or go back after a failover to a replica that missed the
-- last write; flooring it at the server clock keeps tokens rising across
-- both, as long as the server clock does not step back and fewer than a
-- million acquisitions a second are made on one name. Doubles hold
-- integers exactly to 2^53, far above microseconds since 1970.

-- Take the next token from the counter at fence_key; `t` is the reply of
-- TIME. Returns the token and its decimal text (what the counter and the
-- hold's hash store: a plain tostring would print a double as 1.7e+15).
local function fence_next(fence_key, t)
    local token = (tonumber(redis.call('GET', fence_key)) or 0) + 1
    local micros = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if micros > token then
        token = micros
    end
    local text = string.format('%.0f', token)
    redis.call('SET', fence_key, text)
    return token, text
end

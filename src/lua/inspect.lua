-- Read a lock's state in one atomic step, for the admin view.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  fencing counter of the name's slot "dlock:fence:{TAG}"
--
-- Returns {owner or "", count, pttl, token}: the hold's token while held,
-- else the counter's last token (at least this name's last, see
-- lib/fence.lua) or "0". Read-only, so safe to resend.

--@include fence

local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token')
return {h[1] or '', tonumber(h[2]) or 0, redis.call('PTTL', KEYS[1]),
        h[3] or fence_last(KEYS[2], KEYS[1] .. ':fence')}

-- Read a lock's state in one atomic step, for the admin view.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  fencing counter "dlock:{name}:fence"
--
-- Returns {owner or "", count, pttl, last token or "0"}. Read-only, so
-- safe to resend.

local h = redis.call('HMGET', KEYS[1], 'owner', 'count')
return {h[1] or '', tonumber(h[2]) or 0, redis.call('PTTL', KEYS[1]),
        redis.call('GET', KEYS[2]) or '0'}

-- Fencing tokens (lib/fence.lua, pasted into a script by
-- cmake/embed_lua.cmake at a "--@include fence" line).
--
-- Each exclusive hold (a lock, a write hold) gets a token from a counter
-- that never expires: max(last + 1, server time in microseconds, caller's
-- floor + 1). The counter is one per Cluster hash slot,
-- "dlock:fence:{TAG}" with TAG a short tag of the slot (src/slot.c), and
-- every name of that slot draws from it: tokens rise per name because
-- they rise per slot, and names locked once leave no key behind (at most
-- 16384 counters). It moves with its slot in a resharding.
--
-- Earlier versions kept a counter per name ("dlock:{name}:fence",
-- "dlock:{name}:rw:fence"). A grant reads that key too, takes its value
-- as one more floor and deletes it, so a name's tokens never go back
-- across the upgrade. It is built from the hold's key (KEYS[1] .. ':fence')
-- rather than passed in KEYS: it is in the same slot (same hash tag), and
-- every caller of every script would otherwise send one more key.
--
-- The counter alone restarts at 1 after a restart without persistence, or
-- goes back after a failover to a replica that missed the last write. Two
-- floors keep tokens rising across both:
--  - the server clock in microseconds, as long as it does not step back
--    and fewer than a million acquisitions a second are made in one slot;
--  - the caller's floor: the highest token the calling client has seen
--    from this counter, or one the caller passed in (a fenced resource
--    knows the highest token it accepted), so a clock stepped back does
--    not matter to anyone who saw a token before.
-- Doubles hold integers exactly to 2^53, far above microseconds since 1970.

-- Decimal texts are compared by length, then as strings: the counters
-- and the floors are written without leading zeros.
local function fence_below(a, b)
    return #a < #b or (#a == #b and a < b)
end

-- The last token of the counter at fence_key, counting a per-name counter
-- of an earlier version at old_key, as decimal text ('0' when none), for
-- a read hold and the admin view. Reads only.
local function fence_last(fence_key, old_key)
    local last = redis.call('GET', fence_key) or '0'
    local old = redis.call('GET', old_key)
    if old and fence_below(last, old) then
        return old
    end
    return last
end

-- Raise the counter at fence_key to the per-name counter of an earlier
-- version at old_key, if that is higher, and delete old_key: what the
-- name's next grant would do, for a caller that deletes the name's keys.
-- Returns 1 when old_key was there (and is deleted), else 0.
local function fence_fold(fence_key, old_key)
    local old = redis.call('GET', old_key)
    if not old then
        return 0
    end
    if fence_below(redis.call('GET', fence_key) or '0', old) then
        redis.call('SET', fence_key, old)
    end
    redis.call('DEL', old_key)
    return 1
end

-- Take the next token from the counter at fence_key; old_key is the
-- name's per-name counter of earlier versions (folded in and deleted),
-- `t` the reply of TIME, `floor` the caller's floor (a decimal string;
-- nil or "" for none).
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
-- The per-name key costs one GET of a missing key once every name has
-- been granted since the upgrade. SET ... GET needs
-- Redis 6.2; before 7.0 (no redis.REDIS_VERSION_NUM) the counter is read
-- with GET and written with SET, as it always was.
local function fence_next(fence_key, old_key, t, floor)
    local old = redis.call('GET', old_key)
    if old then
        redis.call('DEL', old_key)
        if not floor or fence_below(floor, old) then
            floor = old
        end
    end
    local us = t[2]
    local text = t[1] .. string.rep('0', 6 - #us) .. us
    local token = tonumber(t[1]) * 1000000 + tonumber(us)
    local f = floor and not fence_below(floor, text) and tonumber(floor)
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
    local l = last and not fence_below(last, text) and tonumber(last)
    if l then
        token = l + 1
        text = string.format('%.0f', token)
        redis.call('SET', fence_key, text)
    elseif not set_get then
        redis.call('SET', fence_key, text)
    end
    return token, text
end

-- The count of a latch, as an await reads it (dlock_latch_await() and
-- its asynchronous twin).
--
-- KEYS[1]  "dlock:{name}:latch": the count, or "0" once open
--
-- Returns the count: 0 when open, -1 when not set (never set, or open
-- so long ago that its key expired): an await waits for it to be set
-- and then opened, so that one that starts before the setter does not
-- pass at once.
--
-- One NAME, one kind: a NAME that is a lock or a semaphore is refused
-- (lib/kinds.lua).

--@include kinds

local clash = kinds_clash(string.sub(KEYS[1], 1, -7), ':latch')
if clash then
    return clash
end
local n = redis.call('GET', KEYS[1])
if not n then
    return -1
end
return tonumber(n)

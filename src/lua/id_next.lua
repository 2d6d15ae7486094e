-- Reserve `count` IDs from a day's sequence (the global ID generator).
--
-- KEYS[1]  day counter "icr:<prefix>:<yyyy:MM:dd>" (UTC date)
-- KEYS[2]  that day's count "{icr:<prefix>:<yyyy:MM:dd>}:n": IDs reserved
--          (the hash tag is KEYS[1]'s whole name, so both share its slot)
-- ARGV[1]  how many to reserve
-- ARGV[2]  floor: the caller's millisecond of the UTC day times 49
--
-- Returns the last value reserved; the batch is (last - count, last].
--
-- Why a floor: an ID is (seconds << 32 | sequence), so two IDs collide
-- only in the same second with the same sequence. A restart without
-- persistence (or a failover to a replica that missed the last INCRBY)
-- sends the counter back to 0, and the same second's sequence values would
-- be handed out again. Raising the counter to at least 49 per millisecond
-- of the day (49 * 86,400,000 < 2^32) means a counter that starts over
-- begins above every value handed out earlier that day, unless IDs were
-- being made faster than 49,000 a second just before. The counter only
-- ever grows, so uniqueness between hosts does not depend on their clocks.
--
-- Why a count beside it: the floor makes the sequence useless as a tally
-- (it starts near 49 per millisecond of the day, and jumps there again
-- after a restart), so the number of IDs a day gave out is kept apart. A
-- batch that overflows 32 bits (the caller refuses it: SEQ_MAX in id.c)
-- is not counted.
--
-- Resend safety: a resend after a lost reply reserves a second batch; the
-- first is never handed out, so the day's sequence has a gap but no ID is
-- repeated (and the count includes the lost batch). An operation record
-- would cost a write per call to save a few sequence numbers in a rare
-- failure; it is not worth it here.

local n = tonumber(ARGV[1])
local last = redis.call('INCRBY', KEYS[1], n)
local floor = tonumber(ARGV[2])
if last - n < floor then
    last = floor + n
    redis.call('SET', KEYS[1], string.format('%.0f', last))
end
if last >= n and last <= 4294967295 then
    redis.call('INCRBY', KEYS[2], n)
end
return last

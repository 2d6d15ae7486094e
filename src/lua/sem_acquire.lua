-- Take permits from a semaphore.
--
-- KEYS[1]  "dlock:{name}:sem": permits available (missing = 0)
-- ARGV[1]  permits wanted (>= 1)
--
-- Returns 1 when taken, 0 when too few are available. All or nothing: a
-- caller wanting 3 never holds 1 or 2 of them while it waits, so two
-- callers each wanting most of the permits cannot starve each other.

local available = tonumber(redis.call('GET', KEYS[1])) or 0
local wanted = tonumber(ARGV[1])
if available >= wanted then
    redis.call('DECRBY', KEYS[1], wanted)
    return 1
end
return 0

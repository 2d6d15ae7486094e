-- Delete every key of one name (dlock_delete(), operators only).
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  read-write lock hash "dlock:{name}:rw"
-- KEYS[3]  permits held "dlock:{name}:psem:held"
-- KEYS[4]  latch "dlock:{name}:latch"
-- KEYS[5]  the fencing counter of the name's slot "dlock:fence:{TAG}": kept
-- KEYS[6]  per-name fencing counter of earlier versions "dlock:{name}:fence"
-- KEYS[7]  the same of the read-write lock "dlock:{name}:rw:fence"
-- KEYS[8..] the name's other keys (waiting sets, queues, semaphores, the
--          CLI's records), deleted whatever they hold
-- ARGV[1]  "1": delete even while in use; "0": refuse then
--
-- Returns {n}: n keys deleted; or {-1, kind} when refused, kind being
-- what holds it ("lock", "rwlock", "psem", "latch").
--
-- The slot's counter is shared by every name of the slot, and is what
-- keeps the name's next token above its last: it is never deleted. The
-- per-name counters are folded into it first (lib/fence.lua).

--@include fence

if ARGV[1] ~= '1' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if redis.call('EXISTS', KEYS[1]) == 1 then
        return {-1, 'lock'}
    end
    -- a read-write lock's hash outlives expired readers until purged
    local fields = redis.call('HGETALL', KEYS[2])
    for i = 1, #fields, 2 do
        local f = fields[i]
        if f == 'writer' or (string.sub(f, 1, 2) == 'e:' and tonumber(fields[i + 1]) > now) then
            return {-1, 'rwlock'}
        end
    end
    if redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf') > 0 then
        return {-1, 'psem'}
    end
    -- an open latch is kept as "0" for a while (latch_count_down.lua):
    -- nothing waits on it any more
    local count = redis.call('GET', KEYS[4])
    if count and count ~= '0' then
        return {-1, 'latch'}
    end
end
local n = fence_fold(KEYS[5], KEYS[6]) + fence_fold(KEYS[5], KEYS[7])
for i = 1, #KEYS do
    if i < 5 or i > 7 then
        n = n + redis.call('DEL', KEYS[i])
    end
end
return {n}

-- A waiter of a fair lock gives up: leave the queue, and if it was the
-- head of a free lock, wake the next waiter so the queue does not stall
-- until this waiter's deadline.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  queue "dlock:{name}:q"
-- KEYS[3]  "dlock:{name}:qt"
-- ARGV[1]  owner
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  channel prefix "dlock:{name}:ch:"
-- ARGV[4]  (optional) "1" when the waiter holds nothing: a lock that
--          names it as owner then is one handed to it by a release of its
--          own client whose answer was lost, or by a release of another
--          process whose message it did not get in time (fair_release.lua),
--          and it is released here too, as a holder would release it
-- KEYS[4]  (optional) the queued waiters' offers "dlock:{name}:qo": the
--          waiter's is taken back in the same step, so that no release
--          can hand it the lock after this
--
-- Returns 1 when the owner was queued, else 0. Resend safety: a second
-- run finds nothing to remove or release and wakes nobody; only its
-- answer differs, and nobody reads it.

local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if KEYS[4] then
    redis.call('HDEL', KEYS[4], ARGV[1])
end
local freed = ARGV[4] == '1' and redis.call('HGET', KEYS[1], 'owner') == ARGV[1]
if freed then
    redis.call('DEL', KEYS[1])
end
if (removed > 0 or freed) and redis.call('EXISTS', KEYS[1]) == 0 then
    local head = redis.call('LINDEX', KEYS[2], 0)
    if head then
        redis.call(ARGV[2], ARGV[3] .. head, '1')
    end
end
return removed > 0 and 1 or 0

-- Acquire (or re-enter) a reentrant lock.
--
-- KEYS[1]  lock hash "dlock:{name}": owner, count, token
-- KEYS[2]  fencing counter "dlock:{name}:fence" (never expires)
-- ARGV[1]  owner: "<client id>:<thread number>:<handle number>"
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  holds the caller believes it has (0 for a first acquisition)
-- ARGV[4]  fencing floor: a new token is above it (optional, see lib/fence.lua)
--
-- Returns {1, token} when newly granted, {2, token, count} on re-entry,
-- {0, pttl} when another owner holds it (pttl bounds the caller's sleep).
--
-- Why ARGV[3]: a client that lost the reply to an earlier attempt cannot
-- know whether that attempt ran, and after a failover a replica may bring
-- back a hold of ours that we had already released (the release had not
-- reached it). Either way the server says "yours" while the caller knows of
-- no hold. That hold's token was never seen by the caller, or has since
-- been passed by others' tokens that the replica never heard of, so it is
-- granted afresh with a new token (count 1), never adopted with its old
-- one: tokens stay strictly rising, and a resend cannot leave the count one
-- too high. Only a caller that knows it holds the lock (ARGV[3] > 0)
-- re-enters with the same token.
--
-- Fencing tokens: max(last + 1, server time in microseconds, floor + 1),
-- see lib/fence.lua.

--@include fence

local owner = redis.call('HGET', KEYS[1], 'owner')
local mine = tonumber(ARGV[3])

if owner == ARGV[1] and mine > 0 then
    local count = mine + 1
    redis.call('HSET', KEYS[1], 'count', count)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {2, tonumber(redis.call('HGET', KEYS[1], 'token')), count}
end

if owner and owner ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1])}
end

local token, text = fence_next(KEYS[2], redis.call('TIME'), ARGV[4])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', text)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token}

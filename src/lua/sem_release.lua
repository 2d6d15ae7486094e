-- Return permits to a semaphore and wake as many waiters.
--
-- KEYS[1]  "dlock:{name}:sem"
-- KEYS[2]  channel "dlock:{name}:sem:ch"
-- ARGV[1]  permits returned (>= 1)
-- ARGV[2]  "publish" or "spublish"
--
-- Returns the permits now available. A plain semaphore has no owners:
-- anyone may release, and a holder that crashes never gives its permits
-- back. The permit-expirable semaphore exists for that case.

local available = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return available

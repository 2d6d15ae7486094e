-- A process stops waiting for a plain lock: it leaves the set of waiting
-- processes, so that no release wakes it in vain (acquire.lua).
--
-- KEYS[1]  waiting processes "dlock:{name}:w"
-- ARGV[1]  the client id
--
-- Returns 1 when it was there, else 0. Safe to run twice.

return redis.call('ZREM', KEYS[1], ARGV[1])

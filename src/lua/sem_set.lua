-- Set a counter (semaphore permits, latch count) only if it is unset.
--
-- KEYS[1]  the counter
-- ARGV[1]  the value
--
-- Returns 1 when set, 0 when it already existed. Setting only once lets
-- every process of a fleet call it at start-up without resetting a
-- semaphore that others are using.

if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    return 1
end
return 0

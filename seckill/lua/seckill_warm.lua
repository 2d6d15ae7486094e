-- Load a voucher's sale state into Redis, once.
--
-- KEYS[1]  "seckill:{v:ID}:stock"
-- KEYS[2]  "seckill:{v:ID}:window"
-- KEYS[3]  "seckill:{v:ID}:buyers"
-- ARGV[1]  units left: the database's, minus orders the stream still holds
-- ARGV[2]  begin, ARGV[3] end (Unix seconds)
-- ARGV[4]  "1" when this call is the last of the voucher's warm-up
-- ARGV[5..] user ids that already have an order (persisted or pending)
--
-- Returns 1 when the voucher became warm now, 0 when it already was.
--
-- Why the stock key is written last and only when absent: the order script
-- treats a missing stock key as "not warm", so until the final call sets
-- it no order is taken against a half-loaded buyer set, and a second
-- warm-up (two servers, or a retry) cannot reset the stock of a sale that
-- is already running. Buyers may be sent in several calls (ARGV[4] = "0"
-- for all but the last) because a script's arguments are bounded. The
-- window never changes, so it is written whenever it is missing: a window
-- lost on its own would otherwise keep the voucher cold forever.
if ARGV[4] == '1' and redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3])
end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
for i = 5, #ARGV, 500 do
    local last = math.min(i + 499, #ARGV)
    redis.call('SADD', KEYS[3], unpack(ARGV, i, last))
end
if ARGV[4] ~= '1' then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1

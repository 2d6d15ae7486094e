-- Take one unit of a voucher for one user, and queue the order.
--
-- KEYS[1]  "seckill:{v:ID}:stock"    units left (string)
-- KEYS[2]  "seckill:{v:ID}:window"   hash: begin, end (Unix seconds)
-- KEYS[3]  "seckill:{v:ID}:buyers"   set of user ids that have an order
-- KEYS[4]  "seckill:{v:ID}:orders"   stream of accepted orders
-- KEYS[5]  "seckill:{v:ID}:pending"  hash: order id -> user id, until a
--                                    writer acknowledges the order
-- ARGV[1]  user id
-- ARGV[2]  order id (decimal)
-- ARGV[3]  voucher id
-- ARGV[4]  now, Unix seconds (the server's clock, so both strategies
--          judge the window by the same clock)
-- ARGV[5]  optional: replicas that must be online (`serve --replica-acks`);
--          absent or 0: no check
--
-- Returns {0, stream entry id} when accepted, else {code}:
--   1 not warmed (stock or window missing: a new voucher or a Redis that
--     restarted empty; the caller warms it from the database and retries),
--   2 not started, 3 ended, 4 already ordered, 5 sold out,
--   6 fewer replicas online than ARGV[5] (connected, and acknowledged
--     within the last 3 seconds: replicas acknowledge every second, and a
--     loaded machine delays one now and then).
--
-- Why every check comes before the first write: a Lua script has no
-- rollback, so a script that decremented and then found a reason to refuse
-- would leak a unit. And why XADD is the first write: it is the only one
-- that can fail (out of memory); if it does, nothing has changed, while
-- stock taken without an order message is exactly the lost sale the
-- reference designs suffer from. The pending entry is written here, not
-- by a second command after the answer, so an order is visible as
-- "pending" exactly when its buyer has been told 201.
--
-- Why count replicas here when the caller WAITs for them afterwards: an
-- order WAIT finds unreplicated is answered 429, but it is taken, and it
-- stands if this master survives; while no replica is there at all (after
-- a failover, until one is back) every order would be taken that way and
-- the stock would drain to buyers told "busy". Refused here, nothing is
-- written. WAIT still closes the moments the check cannot see (a replica
-- that stops reading, a link that breaks right after the check).
local stock = redis.call('GET', KEYS[1])
if not stock then return {1} end
local w = redis.call('HMGET', KEYS[2], 'begin', 'end')
local b, e = tonumber(w[1]), tonumber(w[2])
if not b or not e then return {1} end
local now = tonumber(ARGV[4])
if now < b then return {2} end
if now >= e then return {3} end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return {4} end
if tonumber(stock) <= 0 then return {5} end
local want = tonumber(ARGV[5] or '0')
if want > 0 then
    local online = 0
    local info = redis.call('INFO', 'replication')
    for lag in string.gmatch(info, 'slave%d+:[^\r\n]*state=online[^\r\n]*lag=(%d+)') do
        if tonumber(lag) <= 3 then online = online + 1 end
    end
    if online < want then return {6} end
end
local id = redis.call('XADD', KEYS[4], '*', 'order', ARGV[2], 'user', ARGV[1], 'voucher', ARGV[3])
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[2], ARGV[1])
return {0, id}

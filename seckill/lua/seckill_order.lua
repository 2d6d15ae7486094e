-- Take one unit of a voucher for each of one or more users, and queue
-- their orders: the orders of one voucher that arrived while its previous
-- call was in flight (service/batch.c), decided one after the other.
--
-- KEYS[1]  "seckill:{v:ID}:stock"    units left (string)
-- KEYS[2]  "seckill:{v:ID}:window"   hash: begin, end (Unix seconds)
-- KEYS[3]  "seckill:{v:ID}:buyers"   set of user ids that have an order
-- KEYS[4]  "seckill:{v:ID}:orders"   stream of accepted orders
-- KEYS[5]  "seckill:{v:ID}:pending"  hash: order id -> user id, until a
--                                    writer acknowledges the order
-- ARGV[1]  voucher id
-- ARGV[2]  replicas that must be online (`serve --replica-acks`); 0: no
--          check
-- ARGV[3], ARGV[4], ARGV[5]  the first order: user id, order id (decimal),
--          now in Unix seconds (the service's clock when the request came,
--          so both strategies judge the window by the same clock)
-- ARGV[6..8], ...  the next orders, three arguments each
--
-- Returns two elements per order, in the order given: 0 and the stream
-- entry id when accepted, else a code and nil:
--   1 not warmed (stock or window missing: a new voucher or a Redis that
--     restarted empty; the caller warms it from the database and retries),
--   2 not started, 3 ended, 4 already ordered, 5 sold out,
--   6 fewer replicas online than ARGV[2] (connected, and acknowledged
--     within the last 3 seconds: replicas acknowledge every second, and a
--     loaded machine delays one now and then),
--   7 the server refused the write (out of memory); the second element is
--     its message. Nothing was taken for that order.
--
-- Why every check of an order comes before its first write: a Lua script
-- has no rollback, so a script that took a unit and then found a reason
-- to refuse would leak it. And why XADD is each order's first write: it
-- is the only one that can fail (out of memory, and then only as the
-- script's first write: Redis refuses a script's writes for memory only
-- until it has written once, so a later order cannot fail half-way
-- either); if it does, nothing has changed, while stock taken without an
-- order message is exactly the lost sale the reference designs suffer
-- from. The pending entry is written here, not by a second command after
-- the answer, so an order is visible as "pending" exactly when its buyer
-- has been told 201. The stock is written once, after the loop, with
-- what the loop took: nobody else runs in between.
--
-- Why count replicas here when the caller WAITs for them afterwards: an
-- order WAIT finds unreplicated is answered 429, but it is taken, and it
-- stands if this master survives; while no replica is there at all (after
-- a failover, until one is back) every order would be taken that way and
-- the stock would drain to buyers told "busy". Refused here, nothing is
-- written. WAIT still closes the moments the check cannot see (a replica
-- that stops reading, a link that breaks right after the check).
local n = math.floor((#ARGV - 2) / 3)
local out = {}

-- Every order of the call gets the same answer, and nothing is written.
local function all(code)
    for i = 1, n do
        out[2 * i - 1] = code
        out[2 * i] = false
    end
    return out
end

local stock = redis.call('GET', KEYS[1])
if not stock then return all(1) end
local w = redis.call('HMGET', KEYS[2], 'begin', 'end')
local b, e = tonumber(w[1]), tonumber(w[2])
if not b or not e then return all(1) end
stock = tonumber(stock)
local want = tonumber(ARGV[2]) or 0
if want > 0 then
    local online = 0
    local info = redis.call('INFO', 'replication')
    for lag in string.gmatch(info, 'slave%d+:[^\r\n]*state=online[^\r\n]*lag=(%d+)') do
        if tonumber(lag) <= 3 then online = online + 1 end
    end
    if online < want then return all(6) end
end

local taken = 0
for i = 1, n do
    local uid, oid, now = ARGV[3 * i], ARGV[3 * i + 1], tonumber(ARGV[3 * i + 2])
    local code, id = 0, false
    if now < b then
        code = 2
    elseif now >= e then
        code = 3
    elseif redis.call('SISMEMBER', KEYS[3], uid) == 1 then
        code = 4
    elseif stock - taken <= 0 then
        code = 5
    else
        local r = redis.pcall('XADD', KEYS[4], '*', 'order', oid, 'user', uid, 'voucher', ARGV[1])
        if type(r) == 'table' and r.err then
            code, id = 7, r.err
        else
            id = r
            taken = taken + 1
            redis.call('SADD', KEYS[3], uid)
            redis.call('HSET', KEYS[5], oid, uid)
        end
    end
    out[2 * i - 1] = code
    out[2 * i] = id
end
if taken > 0 then redis.call('DECRBY', KEYS[1], taken) end
return out

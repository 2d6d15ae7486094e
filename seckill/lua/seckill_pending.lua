-- Find the voucher whose pending hash holds an order (GET /api/orders:
-- an order id does not name its voucher).
--
-- KEYS[1..n]  "seckill:{v:ID}:pending" hashes, one per voucher asked
-- ARGV[1]     order id
--
-- Returns {i, user id} for the first hash (1-based) that holds the order,
-- else an empty array. Reads only.
--
-- Why a script: on one server or under Sentinel every voucher is asked in
-- one round trip. On Redis Cluster the vouchers live in different slots,
-- and the caller asks one voucher per call.
for i = 1, #KEYS do
    local user = redis.call('HGET', KEYS[i], ARGV[1])
    if user then return {i, user} end
end
return {}

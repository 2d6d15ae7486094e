-- Find a user's order among a voucher's pending ones (GET
-- /api/vouchers/ID/order: a buyer whose 201 was lost asks by voucher,
-- not by order id, which it never saw).
--
-- KEYS[1]  "seckill:{v:ID}:pending"  hash: order id -> user id
-- ARGV[1]  user id
--
-- Returns the order id, or false. Reads only.
--
-- Why a scan: the hash is keyed by order id, and it holds only the orders
-- no writer has acknowledged yet, a few batches' worth while writers run.
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
    if all[i + 1] == ARGV[1] then return all[i] end
end
return false

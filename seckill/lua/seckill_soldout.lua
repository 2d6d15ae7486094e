-- A sold-out voucher as one instance may remember it (service/soldout.c):
-- its window and the users who got a unit, read together.
--
-- KEYS[1]  "seckill:{v:ID}:stock"   units left
-- KEYS[2]  "seckill:{v:ID}:window"  hash: begin, end
-- KEYS[3]  "seckill:{v:ID}:buyers"  set of user ids that have an order
--
-- Returns {begin, end, user id, ...} while the stock is 0, else {} (stock
-- left, or the voucher not warm): nothing to remember. Reads only.
--
-- Why a script: the buyers are final only while the stock stays 0, so the
-- stock, the window and the set are read in one atomic step; read apart,
-- an order taken in between would be missing from the set and its buyer,
-- retrying, told 410 instead of 409.
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
if not stock or stock > 0 then return {} end
local w = redis.call('HMGET', KEYS[2], 'begin', 'end')
if not w[1] or not w[2] then return {} end
local out = {w[1], w[2]}
for _, u in ipairs(redis.call('SMEMBERS', KEYS[3])) do out[#out + 1] = u end
return out

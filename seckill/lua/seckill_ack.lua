-- Acknowledge stream entries a writer has persisted (or dead-lettered),
-- and drop their orders from the pending hash.
--
-- KEYS[1]  "seckill:{v:ID}:orders"   the voucher's stream
-- KEYS[2]  "seckill:{v:ID}:pending"  hash: order id -> user id
-- ARGV[1]  consumer group
-- ARGV[2]  n, the number of entries
-- ARGV[3 .. 2+n]     their stream ids
-- ARGV[3+n .. 2+2n]  their order ids ("" when an entry had none)
--
-- Returns the number of entries acknowledged now.
--
-- Why one script: the entry leaves the group's pending list and its order
-- leaves the pending hash together, so GET /api/orders never finds an
-- order in neither place nor keeps one "pending" after a crash between
-- the two. Safe to run twice: XACK and HDEL of what is gone do nothing.
local n = tonumber(ARGV[2])
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 3, 2 + n))
redis.call('HDEL', KEYS[2], unpack(ARGV, 3 + n, 2 + 2 * n))
return acked

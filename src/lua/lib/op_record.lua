-- Operation record (lib/op_record.lua, pasted into a script by
-- cmake/embed_lua.cmake at a "--@include op_record" line).
--
-- The connection layer sends a command again when a connection breaks
-- before its reply arrives, so a script may run twice for one call. A
-- script whose effect is not set from what the caller knows (permits
-- taken, a count decremented, a lock deleted by force) takes an operation
-- id (src/op.c) and keeps one small record per client thread and object:
--
--   key    "dlock:{name}:op:<client id>:<thread>"  (in KEYS, same slot)
--   value  "<seq>:<result>", an integer result, for ttl milliseconds
--
-- The script asks op_replay() first: a record of this call's seq means the
-- first run applied itself and the reply was lost, so the recorded answer
-- is returned and nothing is applied again. The script writes the record
-- with op_record() after its own writes, once it knows its answer; a run
-- that changed nothing need not record (running it again is harmless).
-- A thread makes one call at a time and a resend only repeats its latest
-- call, so one record per thread and object is enough.

-- The answer recorded for this seq, or nil when this call has not run.
local function op_replay(key, seq)
    local done = redis.call('GET', key)
    if done then
        local recorded, result = string.match(done, '^(%d+):(%-?%d+)$')
        if recorded == seq then
            return tonumber(result)
        end
    end
    return nil
end

-- Record that the call with this seq answered `result`.
local function op_record(key, seq, result, ttl)
    redis.call('SET', key, seq .. ':' .. result, 'PX', ttl)
end

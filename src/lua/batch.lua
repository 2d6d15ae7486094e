-- Several calls of acquire.lua and release.lua, run one after another in
-- one script call.
--
-- KEYS  every call's keys, one call after another
-- ARGV  for every call: "a" (acquire.lua) or "r" (release.lua), how many
--       keys it has, how many arguments, then its arguments
--
-- Returns one reply per call, in order: what the script would have
-- returned, or an error reply with the error it raised. An error stops
-- only its own call, as it would have stopped that script alone; the
-- calls after it run.
--
-- Why: the asynchronous API (src/async.c) sends a burst of calls at once
-- (the acquisitions and releases its callbacks start while the replies of
-- one read are handed back), and most of what a short script costs the
-- server is the call itself: reading the command, finding the script,
-- setting up KEYS and ARGV, writing the reply. Measured in stop 40
-- (docs/BENCHMARKS.md), eight acquire-and-release pairs in one call cost
-- the server about a third less than eight pairs in sixteen calls.
--
-- Each call runs the very text of its script (cmake/embed_lua.cmake
-- pastes it as a function whose KEYS and ARGV are the call's own), so a
-- call means exactly what it means alone. The calls run in the order
-- sent, with nothing of another client between them, which is what the
-- same calls pipelined would do at best. The shared functions are made
-- once for the whole batch: the scripts' own includes of them below
-- become comments.

--@include fence
--@include handoff
--@wrap acquire
--@wrap release

local out, n = {}, 0
local k, a = 0, 1
while a <= #ARGV do
    local run = ARGV[a] == 'a' and acquire or release
    local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    local keys, args = {}, {}
    for i = 1, nk do
        keys[i] = KEYS[k + i]
    end
    for i = 1, na do
        args[i] = ARGV[a + 2 + i]
    end
    k, a = k + nk, a + 3 + na
    local ok, reply = pcall(run, keys, args)
    n = n + 1
    if ok then
        out[n] = reply
    elseif type(reply) == 'table' and reply.err then
        out[n] = reply
    else
        out[n] = {err = tostring(reply)}
    end
end
return out

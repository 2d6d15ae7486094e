-- The hand-off to a waiter of another process (lib/handoff.lua, pasted
-- into release.lua and fair_release.lua at a "--@include handoff" line).
-- One copy of the three parts the waiter's side (src/subscriber.c) and
-- the safety argument (release.lua: "A hand-off is made only to a
-- process that listens here") depend on.

-- An offer "<lease> <floor> <sent> <wait id> <owner>" (acquire.lua,
-- fair_acquire.lua): its five fields, or nil when it is malformed.
local function handoff_terms(offer)
    return string.match(offer, '^(%d+) (%d+) (%-?%d+) (%d+) (.+)$')
end

-- Whether `channel` has a listener on this server. PUBLISH counts only
-- this server's listeners, while a replica passes the message on to its
-- own, so a grant is made only to a waiter that listens here, and then
-- kept. An error (an ACL user who may not run PUBSUB) counts as none.
local function handoff_listens(publish, channel)
    local n = redis.pcall('PUBSUB', publish == 'spublish' and 'SHARDNUMSUB' or 'NUMSUB', channel)
    return type(n) == 'table' and (tonumber(n[2]) or 0) > 0
end

-- Tell the waiter that it holds the lock: "><token> <sent> <wait id> <owner>".
local function handoff_tell(publish, channel, text, sent, wait, owner)
    redis.call(publish, channel, '>' .. text .. ' ' .. sent .. ' ' .. wait .. ' ' .. owner)
end

-- Release one hold of a reentrant lock.
--
-- KEYS[1]  lock hash "dlock:{name}"
-- KEYS[2]  release channel "dlock:{name}:ch"
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, restored while holds remain
-- ARGV[3]  holds the caller has before this release (at least 1)
-- ARGV[4]  "publish", or "spublish" on Redis Cluster
-- KEYS[3]  (optional) waiting processes "dlock:{name}:w" (see acquire.lua);
--          RedLock's give-back of a round without a majority names a set
--          that never exists, so that it publishes nothing (src/redlock.c)
-- KEYS[4]  (optional, with KEYS[3]) "dlock:{name}:r": the woken process
-- ARGV[5]  how long (ms) the woken process has the lock to itself
-- ARGV[6]  (optional, with KEYS[3]) the caller's client id
-- KEYS[5]  (optional, with KEYS[3]) the slot's fencing counter "dlock:fence:{TAG}"
-- KEYS[6]  (optional, with KEYS[5]) the waiting processes' offers
--          "dlock:{name}:o" (acquire.lua)
-- ARGV[7]  (optional, with KEYS[5]) "0" when no thread or acquisition of
--          the caller's client waits for the lock, else how long a
--          registered process counts as waiting (ms, as acquire.lua's
--          ARGV[6])
-- ARGV[8..11]  (optional, with ARGV[7]) a waiting thread of the caller's
--          own client to hand the lock to: the waiter's owner, lease (ms),
--          fencing floor (see lib/fence.lua), and "1" when other waiters
--          of the client wait on
--
-- Returns -1 when ARGV[1] is not the owner (nothing is changed: the hold
-- expired and someone else may own the lock now), else the holds left.
-- The count is set from ARGV[3] rather than decremented so that a resend
-- after a lost reply cannot release twice. When the last hold goes, the
-- waiting process that retried least recently is woken, on its own
-- channel "dlock:{name}:ch:<client id>" (so no other process even reads
-- the message), and it leaves the set (a retry in vain registers it
-- again). When that process is the caller's own (ARGV[6]), nothing is
-- published and -2 is returned instead: the caller wakes its waiter
-- itself, without the trip through the server's pub/sub and its
-- subscriber thread. A release without the waiting set (RedLock's, two
-- keys) wakes one waiter per process subscribed to the lock's channel
-- ("1"); one with the set and none registered publishes nothing.
-- A resend of that last release returns -1, which the caller that knows
-- it resent (src/lock.c) reads as done.
--
-- A caller whose own process has waiters (ARGV[7]) registers it first,
-- keeping its place if it has one. Why: registrations are made by
-- attempts, and a process can have waiters that made none. A newcomer
-- that finds an older waiter of its process in line sleeps without an
-- attempt (bounded barging, src/wait.c), and the older waiter may just
-- have taken the lock in a way that took the process out of the set (it
-- was its process's only waiter when its attempt was sent, or a release
-- handed it the lock). Without this, the release that ends that hold
-- finds nobody registered, publishes where none of them listens, and they
-- sleep until their timed retry (seconds) with the lock free.
--
-- A process is woken only if it is there to hear it: PUBLISH answers how
-- many connections listen on the channel, and a process that died (its
-- connection closed) or lost its subscription counts none. Such a process
-- is dropped from the set and the next one is tried (a few at most; the
-- rest are found by their own timed retries), so a dead waiter costs
-- neither a reservation nor, below, a lease.
--
-- The direct hand-off within the caller's process (ARGV[8..11]): when the
-- caller's own process is next in line and the caller named one of its
-- waiting threads, the lock goes to that thread here, exactly as
-- acquire.lua would grant it (a new token, count 1, the waiter's lease),
-- and {-3, token} is returned: the waiter wakes holding it, without an
-- attempt of its own (a round trip less per hand-off). Its process stays
-- registered if others of it wait on. The caller keeps the waiter asleep
-- until the answer is in, so no one gives up a lock it is being handed.
-- When the reply is lost, the caller wakes the waiter as if nothing had
-- been handed over; its attempt then finds itself the owner with no hold
-- it knows of, which acquire.lua grants afresh with a new token.
--
-- The hand-off to another process (KEYS[6]): a process whose one waiting
-- thread registered an offer (acquire.lua: "<lease> <floor> <sent>
-- <wait id> <owner>") is handed the lock the same way, and the message on
-- its channel says so: "><token> <sent> <wait id> <owner>". Its subscriber
-- gives the hold to that thread if it still waits in that wait (a message
-- that comes late must not be taken by its next wait), and it wakes
-- holding it. <sent> is the send time (the waiter's own clock) of the
-- attempt that made the offer, which the grant cannot precede, so the
-- waiter counts its lease from there. A waiter that gave up meanwhile
-- takes its offer back and then gives back a lock it was handed
-- (src/lock.c, give_back), in that order, so no hand-off can come after
-- it has looked.
--
-- A hand-off is made only to a process that listens here, on this
-- server (PUBSUB NUMSUB, SHARDNUMSUB on Cluster, asked first; the script
-- runs alone, so PUBLISH then counts the same), and is then always kept.
-- Why not publish and take the grant back when PUBLISH counts no one, as
-- the plain wake-up below does with its reservation: PUBLISH counts only
-- this server's listeners, yet a replica of it passes the message on to
-- its own (replication carries PUBLISH; Cluster sends SPUBLISH to every
-- node of the shard), and a waiter's link can sit on one (a demoted
-- master it stayed on, or a killed master that came back and took the
-- subscription before it learnt it was a replica). A hand-off taken back
-- would still reach that waiter, which would hold a lock already given
-- to the next process. So a process with an offer that does not listen
-- here (it died, or listens elsewhere) is woken like one without: a
-- wake-up heard anywhere costs only an attempt.

if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
    return -1
end
-- ARGV[3] and ARGV[7] compared as text, not converted: see acquire.lua.
local left = ARGV[3] == '1' and 0 or tonumber(ARGV[3]) - 1
if left > 0 then
    redis.call('HSET', KEYS[1], 'count', left)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return left
end
redis.call('DEL', KEYS[1])
-- EXISTS first: an uncontended lock has no waiting set, and one call is
-- cheaper than the three below (each redis.call costs the server about as
-- much as a small command of its own).
local own = ARGV[7] or '0'
if KEYS[3] and (own ~= '0' or redis.call('EXISTS', KEYS[3]) == 1) then
    own = tonumber(own)
    -- The shared functions are pasted here, not at the top: a local
    -- function is made anew on each call that reaches it, and a release
    -- nobody waits for never needs them.
--@include fence
--@include handoff
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    if own > 0 and redis.call('ZADD', KEYS[3], 'NX', now + own, ARGV[6]) == 1 then
        redis.call('PEXPIRE', KEYS[3], own)
    end
    for _ = 1, 4 do
        local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
        if not first then
            break
        end
        redis.call('ZREM', KEYS[3], first)
        local offer = KEYS[6] and redis.call('HGET', KEYS[6], first)
        if offer then
            redis.call('HDEL', KEYS[6], first)
        end
        if first == ARGV[6] then
            if ARGV[8] then
                local token, text = fence_next(KEYS[5], KEYS[1] .. ':fence', t, ARGV[10])
                redis.call('HSET', KEYS[1], 'owner', ARGV[8], 'count', 1, 'token', text)
                redis.call('PEXPIRE', KEYS[1], ARGV[9])
                if ARGV[11] == '1' then
                    redis.call('ZADD', KEYS[3], now + own, ARGV[6])
                    redis.call('PEXPIRE', KEYS[3], own)
                end
                return {-3, token}
            end
            if KEYS[4] then
                redis.call('SET', KEYS[4], first, 'PX', ARGV[5])
            end
            return -2
        end
        local channel = KEYS[2] .. ':' .. first
        local lease, floor, sent, wait, owner
        if offer then
            lease, floor, sent, wait, owner = handoff_terms(offer)
        end
        if owner and not handoff_listens(ARGV[4], channel) then
            owner = nil
        end
        if owner then
            local _, text = fence_next(KEYS[5], KEYS[1] .. ':fence', t, floor)
            redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'token', text)
            redis.call('PEXPIRE', KEYS[1], lease)
            handoff_tell(ARGV[4], channel, text, sent, wait, owner)
            return 0
        end
        if KEYS[4] then
            redis.call('SET', KEYS[4], first, 'PX', ARGV[5])
        end
        if redis.call(ARGV[4], channel, '1') > 0 then
            return 0
        end
        if KEYS[4] then
            redis.call('DEL', KEYS[4])
        end
    end
end
-- With none registered, wake those subscribed to the lock's channel:
-- RedLock's waiters, whose release (two keys) has no waiting set. A plain
-- lock's waiters listen on their process's channel only and are
-- registered by their attempts, so a release that names the set skips
-- this publish, which every uncontended release used to pay for nobody
-- (a waiter of a version older than the per-process channels, if one is
-- still running, finds the lock by its timed retry instead).
if not KEYS[3] then
    redis.call(ARGV[4], KEYS[2], '1')
end
return 0

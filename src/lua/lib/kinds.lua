-- One NAME, one kind (lib/kinds.lua, pasted into the scripts that take or
-- make a lock, semaphore or latch at a "--@include kinds" line).
--
-- Each kind keeps its state in keys of its own ("dlock:{NAME}" for the
-- plain and fair lock, ":rw", ":sem", ":psem", ":latch"), so without this
-- check a plain lock and a write lock on one NAME would both be granted.
-- A script refuses when a key of another kind exists, with an error reply
-- "WRONGKIND NAME is held as a write lock" that src/link.c turns into
-- DLOCK_ERR_WRONG_KIND with the text after the code as its message.
--
-- The other kinds' keys are made here from the caller's own key by their
-- suffixes, not passed in KEYS: they carry the same hash tag {NAME}, so
-- they are in the caller's Cluster slot, and the uncontended plain lock
-- pays for no more arguments (docs/design/keys.md).

-- Suffixes of each kind's key after "dlock:{NAME}", and what to call a
-- NAME that has one.
local kinds_suffix = {'', ':rw', ':sem', ':psem', ':latch'}
local kinds_what = {'held as a lock', 'held as a read lock', 'in use as a semaphore',
                    'in use as a permit-expirable semaphore', 'in use as a latch'}

-- nil when NAME has no key of a kind other than `mine` (one of
-- kinds_suffix); else the error reply naming the kind that has one.
-- `base` is "dlock:{NAME}". One EXISTS when there is none.
local function kinds_clash(base, mine)
    local keys = {}
    for _, s in ipairs(kinds_suffix) do
        if s ~= mine then
            keys[#keys + 1] = base .. s
        end
    end
    if redis.call('EXISTS', unpack(keys)) == 0 then
        return nil
    end
    for i, s in ipairs(kinds_suffix) do
        if s ~= mine and redis.call('EXISTS', base .. s) == 1 then
            local what = kinds_what[i]
            if s == ':rw' and redis.call('HEXISTS', base .. s, 'writer') == 1 then
                what = 'held as a write lock'
            end
            local name = string.match(base, '{(.*)}$') or base
            return redis.error_reply('WRONGKIND ' .. name .. ' is ' .. what)
        end
    end
    return nil
end

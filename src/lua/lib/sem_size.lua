-- The size a semaphore's "set", "resize" or "add" asks for
-- (lib/sem_size.lua, pasted into sem_set.lua and psem_set.lua at a
-- "--@include sem_size" line): one copy of the rules both kinds follow.

-- `size` is the stored size (nil: none), `n` the call's number, `mode`
-- "set" (make it only if there is none, refuse another size), "resize"
-- (to n) or "add" (n more, or fewer). Returns the new size, or nil and
-- the answer to give without changing anything: {0, size} a "set" of
-- the stored size, {-1, size} a "set" of another or an "add" below 0.
local function sem_size_new(size, n, mode)
    if mode == 'set' then
        if size then
            return nil, {size == n and 0 or -1, size}
        end
        return n
    end
    local new = mode == 'add' and (size or 0) + n or n
    if new < 0 then
        return nil, {-1, size or 0}
    end
    return new
end

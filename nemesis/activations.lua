-- nemesis/activations.lua: the `activation` records of check 5 (at most
-- one activation of an ordinary entity at a time while no fault is
-- active), made from the clients' `who` calls.
--
-- A `who` ask to a Seq entity (spec/fixtures/seq.lua) answers with the
-- node that ran it and an activation id the entity drew when it first
-- handled a message (`{node = "n2", act = "..."}`). The activation that
-- answered a call was alive at some instant of the call's window
-- [start, end] (client clock, ms). Between two of its calls it was alive
-- all along, so the span it was surely alive is from the earliest end of
-- a call it answered to the latest start of one: that is the record's
-- `start` and `end`. An activation whose calls all overlap (one reply, or
-- replies at once) has no such span and gives no record: the check may
-- miss it, but never reports an activation that was not there.

local M = {}

-- The activation records of the list of call records `calls` (others
-- are skipped), sorted by entity and start.
function M.build(calls)
    local by_key, keys = {}, {}
    for _, c in ipairs(calls) do
        local v = c.value
        if c.kind == "who" and c.outcome == "ok" and type(v) == "table"
                and type(v.node) == "string" and type(v.act) == "string"
                and type(c.start) == "number"
                and type(c["end"]) == "number" then
            local key = table.concat({ c.type, c.id, v.node, v.act }, "\0")
            local a = by_key[key]
            if not a then
                a = { type = c.type, id = c.id, node = v.node, act = v.act,
                      first_end = c["end"], last_start = c.start,
                      replies = 0 }
                by_key[key] = a
                keys[#keys + 1] = key
            end
            a.replies = a.replies + 1
            if c["end"] < a.first_end then a.first_end = c["end"] end
            if c.start > a.last_start then a.last_start = c.start end
        end
    end
    local out = {}
    for _, key in ipairs(keys) do
        local a = by_key[key]
        if a.first_end <= a.last_start then
            out[#out + 1] = { kind = "activation", type = a.type, id = a.id,
                              node = a.node, act = a.act,
                              start = a.first_end, ["end"] = a.last_start,
                              replies = a.replies }
        end
    end
    table.sort(out, function(x, y)
        if x.type ~= y.type then return x.type < y.type end
        if x.id ~= y.id then return x.id < y.id end
        return x.start < y.start
    end)
    return out
end

return M

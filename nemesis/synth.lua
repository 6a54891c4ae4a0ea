#!/usr/bin/env luajit
-- nemesis/synth.lua: writes a synthetic, linearizable history and its
-- journal, to measure the checker (nemesis/README.md "Speed").
--
--   luajit nemesis/synth.lua SEED REGISTERS CALLS CLIENTS HISTORY JOURNAL
--
-- CALLS calls in all, spread over REGISTERS registers (Reg/r1...), each
-- driven by CLIENTS concurrent clients: reads, writes and CAS (mostly
-- CAS, which expect the last value the client saw), 5% of them with an
-- unknown outcome (half of those took effect) and 2% refused with
-- stale_owner. Each call takes effect at a random instant inside its
-- window, so the history is linearizable by construction and the
-- checker must pass it.

local cjson = require "cjson"

local seed, nreg, ncalls, nclients, hpath, jpath = ...
seed, nreg, ncalls, nclients = tonumber(seed), tonumber(nreg),
    tonumber(ncalls), tonumber(nclients)
if not (seed and nreg and ncalls and nclients and hpath and jpath) then
    io.stderr:write("usage: luajit nemesis/synth.lua SEED REGISTERS CALLS "
                    .. "CLIENTS HISTORY JOURNAL\n")
    os.exit(2)
end
math.randomseed(seed)
local random = math.random

local hist = assert(io.open(hpath, "w"))
local jour = assert(io.open(jpath, "w"))
local per = math.floor(ncalls / nreg)

for r = 1, nreg do
    local id = "r" .. r
    -- each client runs its calls one after the other; clients overlap
    local calls = {}
    for c = 1, nclients do
        local t = random(0, 20)
        local mine = math.floor(per / nclients)
            + (c <= per % nclients and 1 or 0)
        for i = 1, mine do
            local dur = random(1, 30)
            calls[#calls + 1] = { client = "c" .. c, start = t,
                                  ["end"] = t + dur,
                                  at = t + random() * dur,
                                  op_id = string.format("%s-c%d-%d", id,
                                                        c, i) }
            t = t + dur + random(0, 10)
        end
    end
    -- run them in the order they took effect
    table.sort(calls, function(a, b) return a.at < b.at end)
    local value, seq, seen = 0, 0, {}
    for _, c in ipairs(calls) do
        local roll = random()
        local rec = { client = c.client, op_id = c.op_id, type = "Reg",
                      id = id, start = c.start, ["end"] = c["end"],
                      outcome = "ok" }
        local applied = true
        if roll < 0.02 then
            rec.outcome, rec.error, applied = "fail", "stale_owner", false
        elseif roll < 0.07 then
            rec.outcome, rec["end"] = "unknown", nil
            applied = random() < 0.5
        end
        local k = random()
        if k < 0.15 then
            rec.kind = "read"
            rec.args = {}
            if rec.outcome == "ok" then rec.value = { value = value } end
        elseif k < 0.25 then
            rec.kind = "write"
            rec.args = { value = c.op_id }
        else
            rec.kind = "cas"
            local expect = seen[c.client] or 0
            rec.args = { expect = expect, value = c.op_id }
            if expect ~= value then
                applied = false
                if rec.outcome == "ok" then
                    rec.value = { ok = false, current = value }
                end
            elseif rec.outcome == "ok" then
                rec.value = { ok = true }
            end
        end
        if applied and rec.kind ~= "read" then
            value = c.op_id
            seq = seq + 1
            jour:write(cjson.encode({ table = "events", type = "Reg",
                id = id, sequence = seq, epoch = 1,
                payload = cjson.encode({ op_id = c.op_id }) }), "\n")
        end
        if rec.outcome == "ok" then seen[c.client] = value end
        hist:write(cjson.encode(rec), "\n")
    end
end
hist:close()
jour:close()

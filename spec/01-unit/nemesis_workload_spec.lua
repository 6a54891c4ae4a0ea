-- The nemesis workload (nemesis/register.lua, nemesis/counter.lua: pure
-- command and apply, called directly as in account_spec.lua) and the
-- harness's schedule (nemesis/run --plan: nothing is started).
package.path = "./?.lua;" .. package.path

local cjson = require "cjson"
local register = require "nemesis.register"
local counter = require "nemesis.counter"

local function ctx()
    local c = { replies = {} }
    function c.reply(self, v)
        assert(#self.replies == 0, "a second reply")
        self.replies[#self.replies + 1] = cjson.decode(cjson.encode(v))
    end
    return c
end

-- one command as the runtime runs it: command, apply each event, reply
local function run(mod, state, cmd)
    local c = ctx()
    local events = mod.command(state, cmd, c) or {}
    for _, ev in ipairs(events) do
        state = mod.apply(state, cjson.decode(cjson.encode(ev))) or state
    end
    return state, events, c.replies[1]
end

-- the output and exit status of a shell command
local function sh(cmd)
    local f = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
    local out = f:read("*a")
    f:close()
    local rc = tonumber(out:match("rc=(%d+)\n$"))
    return out:gsub("rc=%d+\n$", ""), rc
end

describe("nemesis register", function()
    it("a cas from null swaps and writes one event with the op id", function()
        local s, events, reply = run(register, register.init(),
            { type = "cas", expect = cjson.null, value = "a", op = "o1" })
        assert.same({ ok = true }, reply)
        assert.same({ { type = "set", value = "a", op_id = "o1" } }, events)
        local _, _, r = run(register, s, { type = "read" })
        assert.same({ value = "a" }, r)
    end)

    it("a cas from the wrong value writes nothing and says the current",
       function()
        local s = run(register, register.init(),
            { type = "write", value = "a", op = "o1" })
        local _, events, reply = run(register, s,
            { type = "cas", expect = "b", value = "c", op = "o2" })
        assert.same({}, events)
        assert.same({ ok = false, current = "a" }, reply)
        local _, _, never = run(register, register.init(),
            { type = "cas", expect = "a", value = "c", op = "o3" })
        assert.same({ ok = false, current = cjson.null }, never)
    end)

    it("reads null before any write", function()
        local _, events, reply = run(register, register.init(),
                                     { type = "read" })
        assert.same({}, events)
        assert.same({ value = cjson.null }, reply)
    end)
end)

describe("nemesis counter", function()
    it("add writes one event with the op id; get writes none", function()
        local s, events, reply = run(counter, counter.init(),
            { type = "add", n = 2, op = "o1" })
        assert.same({ { type = "added", n = 2, op_id = "o1" } }, events)
        assert.same({ total = 2 }, reply)
        local _, none, r = run(counter, s, { type = "get" })
        assert.same({}, none)
        assert.same({ total = 2 }, r)
    end)
end)

describe("nemesis/run --plan", function()
    it("prints the same schedule for the same seed, another for another",
       function()
        local a, rc = sh("nemesis/run --seed 7 --faults 20 --plan")
        assert.equal(0, rc)
        local lines = 0
        for line in a:gmatch("[^\n]+") do
            if line:match("^t=") then
                lines = lines + 1
                assert.truthy(line:match("^t=%d+%.%ds %a"), line)
            end
        end
        assert.equal(20, lines)
        assert.equal(a, (sh("nemesis/run --seed 7 --faults 20 --plan")))
        assert.not_equal(a, (sh("nemesis/run --seed 8 --faults 20 --plan")))
    end)

    it("draws every kind, with reload's weights and broken files and "
       .. "pg_kill of one node or all", function()
        local out, rc = sh("nemesis/run --seed 3 --faults 200 --plan")
        assert.equal(0, rc)
        local kinds = {}
        for line in out:gmatch("[^\n]+") do
            local kind = line:match("^t=%S+ (%S+)")
            if kind then kinds[kind] = true end
        end
        for _, k in ipairs({ "pause", "kill", "leave", "move", "pg_restart",
                             "reload", "pg_kill" }) do
            assert.truthy(kinds[k], k)
        end
        assert.matches("\nt=%S+ reload strategy weights [1-3],[1-3],[1-3],"
                       .. "[1-3],[1-3] for %d", out)
        for _, b in ipairs({ "syntax", "raise_load", "raise_call" }) do
            assert.matches("weights [%d,]+ after a broken %(" .. b
                           .. "%) for", out)
        end
        assert.matches("\nt=%S+ pg_kill all for ", out)
        assert.matches("\nt=%S+ pg_kill n%d for ", out)
    end)

    it("refuses bad options with exit 2", function()
        for _, args in ipairs({ "--faults x", "--faults -1",
                                "--clients 0", "--clients 17", "--bogus" }) do
            local out, rc = sh("nemesis/run --plan " .. args)
            assert.equal(2, rc, args .. ": " .. out)
        end
    end)
end)

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
local sh = require "helpers.sh"

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

    it("draws the partition kinds in the netns mode (the default), held "
       .. "1.1 to 10 s, each naming its nodes", function()
        local out, rc = sh("nemesis/run --seed 7 --faults 30 --plan")
        assert.equal(0, rc, out)
        assert.truthy(out:match("^nemesis: seed 7, 30 faults, 4 clients, "
                                .. "netns\n"), out)
        local seen = {}
        for line in out:gmatch("[^\n]+") do
            local kind = line:match("^t=[%d.]+s (%S+)")
            if kind then seen[kind] = (seen[kind] or 0) + 1 end
            local held = line:match("^t=[%d.]+s %a+ .* for ([%d.]+)s$")
            if kind == "isolate" or kind == "pg_cut" then
                assert.truthy(line:match(" n[1-5] for "), line)
            elseif kind == "split" then
                -- two nodes against three, each node once
                local a, b = line:match(" (n%d,n%d)|(n%d,n%d,n%d) for ")
                assert.truthy(a and b, line)
                local all = {}
                for k in (a .. "," .. b):gmatch("%d") do all[#all + 1] = k end
                table.sort(all)
                assert.equal("12345", table.concat(all))
            elseif kind == "bridge" then
                assert.truthy(line:match(" n%d,n%d|n%d|n%d,n%d for "), line)
            elseif kind == "oneway" then
                local from, to = line:match(" n(%d)%->n(%d) cut for ")
                assert.truthy(from and from ~= to, line)
            end
            if held and (kind == "isolate" or kind == "split"
                         or kind == "oneway" or kind == "bridge"
                         or kind == "pg_cut") then
                held = tonumber(held)
                assert.truthy(held >= 1.1 and held <= 10, line)
            end
        end
        for _, k in ipairs({ "isolate", "split", "oneway", "bridge",
                             "pg_cut", "pause", "kill" }) do
            assert.truthy(seen[k], "no " .. k .. " in\n" .. out)
        end
    end)

    it("--loopback draws no partition, and the same seed gives the same "
       .. "schedule", function()
        local out, rc = sh("nemesis/run --seed 1 --faults 12 --plan "
                           .. "--loopback")
        assert.equal(0, rc, out)
        assert.equal(out, (sh("nemesis/run --seed 1 --faults 12 --plan "
                              .. "--loopback")))
        assert.not_equal(out, (sh("nemesis/run --seed 2 --faults 12 --plan "
                                  .. "--loopback")))
        local many = sh("nemesis/run --seed 3 --faults 200 --plan --loopback")
        for _, k in ipairs({ "isolate", "split", "oneway", "bridge",
                             "pg_cut" }) do
            assert.falsy(many:find("s " .. k .. " ", 1, true), k)
        end
    end)

    it("refuses bad options with exit 2", function()
        for _, args in ipairs({ "--faults x", "--faults -1",
                                "--clients 0", "--clients 17", "--bogus" }) do
            local out, rc = sh("nemesis/run --plan " .. args)
            assert.equal(2, rc, args .. ": " .. out)
        end
    end)
end)

describe("nemesis/net rules", function()
    local net = require "nemesis.net"
    local hosts = { "10.213.9.11", "10.213.9.12", "10.213.9.13",
                    "10.213.9.14", "10.213.9.15" }
    local gw = "10.213.9.1"

    it("isolate cuts one node from every other node, both ways", function()
        local r = net.rules("isolate", { node = 2 }, hosts, gw, 5432)
        assert.same({ [2] = {
            "input ip saddr { 10.213.9.11, 10.213.9.13, 10.213.9.14, "
                .. "10.213.9.15 } drop",
            "output ip daddr { 10.213.9.11, 10.213.9.13, 10.213.9.14, "
                .. "10.213.9.15 } drop" } }, r)
    end)

    it("split cuts each side from the other; bridge leaves the middle "
       .. "node talking to both", function()
        local r = net.rules("split", { a = { 1, 4 }, b = { 2, 3, 5 } },
                            hosts, gw, 5432)
        assert.same({ "input ip saddr { 10.213.9.12, 10.213.9.13, "
            .. "10.213.9.15 } drop", "output ip daddr { 10.213.9.12, "
            .. "10.213.9.13, 10.213.9.15 } drop" }, r[1])
        assert.same({ "input ip saddr { 10.213.9.11, 10.213.9.14 } drop",
            "output ip daddr { 10.213.9.11, 10.213.9.14 } drop" }, r[5])
        local b = net.rules("bridge", { a = { 1, 2 }, mid = 3,
                                        b = { 4, 5 } }, hosts, gw, 5432)
        assert.is_nil(b[3])
        assert.same({ "input ip saddr { 10.213.9.14, 10.213.9.15 } drop",
            "output ip daddr { 10.213.9.14, 10.213.9.15 } drop" }, b[2])
        assert.same({ "input ip saddr { 10.213.9.11, 10.213.9.12 } drop",
            "output ip daddr { 10.213.9.11, 10.213.9.12 } drop" }, b[4])
    end)

    it("oneway drops only what the receiver gets from the sender", function()
        assert.same({ [4] = { "input ip saddr 10.213.9.12 drop" } },
            net.rules("oneway", { from = 2, to = 4 }, hosts, gw, 5432))
    end)

    it("pg_cut drops only PostgreSQL's port on the gateway; no rule ever "
       .. "drops the gateway (clients, harness) otherwise", function()
        assert.same({ [3] = {
            "output ip daddr 10.213.9.1 tcp dport 5432 drop",
            "input ip saddr 10.213.9.1 tcp sport 5432 drop" } },
            net.rules("pg_cut", { node = 3 }, hosts, gw, 5432))
        for _, c in ipairs({ { "isolate", { node = 1 } },
                             { "split", { a = { 1 }, b = { 2, 3 } } },
                             { "oneway", { from = 1, to = 2 } },
                             { "bridge", { a = { 1 }, mid = 2,
                                           b = { 3 } } } }) do
            for _, list in pairs(net.rules(c[1], c[2], hosts, gw, 5432)) do
                for _, rule in ipairs(list) do
                    assert.falsy(rule:find(gw .. "[ ,}]"), rule)
                end
            end
        end
    end)

    it("refuses a bad partition", function()
        for _, c in ipairs({
            { "isolate", { node = 6 } }, { "isolate", {} },
            { "split", { a = { 1 }, b = {} } },
            { "split", { a = { 1, 2 }, b = { 2, 3 } } },
            { "bridge", { a = { 1 }, mid = 1, b = { 2 } } },
            { "bridge", { a = { 1 }, b = { 2 } } },
            { "oneway", { from = 2, to = 2 } },
            { "flood", { node = 1 } } }) do
            assert.has_error(function()
                net.rules(c[1], c[2], hosts, gw, 5432)
            end)
        end
    end)

    it("names a run's objects after its id, short enough for Linux "
       .. "(15 bytes)", function()
        local n = net.names(4194304, 5)
        assert.equal("msb4194304", n.bridge)
        assert.equal("msn4194304-5", n.ns[5])
        assert.equal("msv4194304-1", n.veth[1])
        assert.truthy(#n.veth[5] <= 15)
    end)
end)

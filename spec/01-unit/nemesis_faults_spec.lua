-- The parts of the nemesis harness's reload and pg_kill faults that run
-- without a cluster (nemesis/faults.lua), the activation records made
-- from the clients' `who` calls (nemesis/activations.lua) as the checker
-- reads them, and the Seq fixture's `who` answer.
package.path = "./?.lua;" .. package.path

local faults = require "nemesis.faults"
local activations = require "nemesis.activations"
local checker = require "nemesis.checker"
local views = require "helpers.views"
local node = require "helpers.node"

local template = node.read_file("nemesis/strategy.lua")

-- the strategy module the text defines, loaded as the config would
local function load_strategy(text)
    local chunk, err = loadstring(text, "=nemesis_strategy")
    if not chunk then return nil, err end
    local ok, mod = pcall(chunk)
    if not ok then return nil, mod end
    return mod
end

describe("nemesis reload: the strategy file", function()
    it("places by the weights it is given, under one id", function()
        local even = assert(load_strategy(faults.strategy_source(template,
            { 1, 1, 1, 1, 1 }))).new()
        local heavy = assert(load_strategy(faults.strategy_source(template,
            { 3, 1, 1, 1, 1 }))).new()
        assert.equal("nemesis_weighted", even.id)
        assert.equal(even.id, heavy.id) -- restarted nodes still register
        local members = views.members(5)
        local v = views.fill(even, views.view{ members = members,
                                               shard_count = 8 })
        assert.same({ n1 = 2, n2 = 2, n3 = 2, n4 = 1, n5 = 1 },
                    views.counts(v))
        -- the rewritten weights move shards onto n1 in rebalance rounds
        assert.is_true(#heavy:rebalance(v) > 0)
        views.converge(heavy, v)
        local c = views.counts(v)
        assert.is_true(c.n1 >= 3, "n1 has " .. c.n1)
    end)

    it("writes each broken kind so that it fails where it should",
       function()
        local _, err = load_strategy(faults.strategy_source(template,
            { 1, 1, 1, 1, 1 }, "syntax"))
        assert.truthy(err)
        _, err = load_strategy(faults.strategy_source(template,
            { 1, 1, 1, 1, 1 }, "raise_load"))
        assert.matches("raises", err)
        local s = assert(load_strategy(faults.strategy_source(template,
            { 1, 1, 1, 1, 1 }, "raise_call"))).new()
        local v = views.view{ members = views.members(5), shard_count = 8 }
        assert.has_error(function() s:allocate(0, v) end)
        assert.has_error(function() s:rebalance(v) end)
        assert.equal(3, #faults.BROKEN)
    end)

    it("refuses bad weights and an unknown broken kind", function()
        assert.has_error(function()
            faults.strategy_source(template, { 1, 0 })
        end)
        assert.has_error(function()
            faults.strategy_source(template, { 1 }, "nonsense")
        end)
        assert.has_error(function()
            faults.strategy_source("return {}", { 1 })
        end)
    end)

    it("writes the file at once", function()
        local dir = node.tmpdir()
        local path = dir .. "/s.lua"
        faults.write_atomic(path, "one")
        faults.write_atomic(path, "two")
        assert.equal("two", node.read_file(path))
        assert.is_nil(io.open(path .. ".tmp", "r"))
    end)

    it("counts the reload lines of the strategy file in a log", function()
        local log = table.concat({
            "I reload: /d/nemesis_strategy.lua: strategy of Register "
                .. "replaced (nemesis_weighted)",
            "I reload: /d/nemesis_strategy.lua: strategy of Seq replaced "
                .. "(nemesis_weighted)",
            "W reload: /d/nemesis_strategy.lua: strategy of Counter: "
                .. "dry run failed; the old strategy stays",
            "W reload: /d/nemesis_register.lua: oops; the old code stays",
            "I something else replaced",
        }, "\n")
        assert.same({ 2, 1 }, { faults.reload_lines(log) })
        assert.same({ 0, 0 }, { faults.reload_lines("") })
    end)
end)

describe("nemesis pg_kill", function()
    it("ends all backends but its own, or those of some client ports",
       function()
        local all = faults.kill_sql("nemesis")
        assert.matches("pg_terminate_backend", all)
        assert.matches("datname = 'nemesis'", all, 1, true)
        assert.matches("pid <> pg_backend_pid()", all, 1, true)
        assert.not_matches("client_port", all)
        local some = faults.kill_sql("nemesis", { 40001, 40002 })
        assert.matches("client_port IN (40001, 40002)", some, 1, true)
        -- a node without connections: nothing to end (not all of them)
        assert.is_nil(faults.kill_sql("nemesis", {}))
        assert.has_error(function() faults.kill_sql("x'; DROP", nil) end)
        assert.has_error(function() faults.kill_sql("n", { "1) OR (1" }) end)
    end)

    it("finds a process's client ports to a server port from /proc",
       function()
        -- a process that listens and connects to itself, printing the
        -- server port and its client's port
        local out = node.tmpdir() .. "/ports"
        local proc = node.spawn({ "luajit", "-e", [[
local ffi = require "ffi"
ffi.cdef[=[
struct ms_sin { uint16_t family; uint16_t port; uint32_t addr;
                uint8_t zero[8]; };
int socket(int, int, int);
int bind(int, const void *, uint32_t);
int listen(int, int);
int getsockname(int, void *, uint32_t *);
int connect(int, const void *, uint32_t);
int accept(int, void *, void *);
unsigned int sleep(unsigned int);
]=]
local C, bit = ffi.C, require "bit"
local function port_of(fd)
    local a = ffi.new("struct ms_sin[1]")
    local len = ffi.new("uint32_t[1]", ffi.sizeof("struct ms_sin"))
    assert(C.getsockname(fd, a, len) == 0)
    return a[0]
end
local s = C.socket(2, 1, 0)
local a = ffi.new("struct ms_sin[1]")
a[0].family, a[0].addr = 2, 0x0100007f -- 127.0.0.1, network order
assert(C.bind(s, a, ffi.sizeof(a[0])) == 0 and C.listen(s, 1) == 0)
local sa = port_of(s)
local c = C.socket(2, 1, 0)
assert(C.connect(c, ffi.new("struct ms_sin[1]", sa), ffi.sizeof(sa)) == 0)
assert(C.accept(s, nil, nil) >= 0)
local function host(p) return bit.bor(bit.rshift(p, 8), bit.lshift(bit.band(p, 255), 8)) end
io.write(host(sa.port), " ", host(port_of(c).port), "\n")
io.flush()
C.sleep(30)
]] }, { stdout = out })
        local text
        node.wait_until(function()
            text = node.read_file(out)
            return text and text:match("%d+ %d+\n")
        end, 10, "the ports printed")
        local server, client = text:match("(%d+) (%d+)")
        local ports = faults.client_ports(proc.pid, tonumber(server))
        proc:terminate(1)
        assert.same({ tonumber(client) }, ports)
        assert.same({}, faults.client_ports(proc.pid, tonumber(server)))
    end)
end)

-- a `who` call of client c1: window, the node and activation answering
local function who(s, e, n, act, outcome)
    return { client = "c1", op_id = "w" .. s, kind = "who", type = "Seq",
             id = "s1", args = {}, start = s, ["end"] = e,
             outcome = outcome or "ok",
             value = n and { node = n, act = act } or nil }
end

describe("nemesis activation records", function()
    it("span from an activation's first reply's end to its last call's "
       .. "start", function()
        local acts = activations.build({
            who(0, 10, "n1", "a"), who(20, 30, "n1", "a"),
            who(40, 45, "n1", "a"),
            who(50, 60, "n2", "b"), who(70, 80, "n2", "b"),
        })
        assert.same({
            { kind = "activation", type = "Seq", id = "s1", node = "n1",
              act = "a", start = 10, ["end"] = 40, replies = 3 },
            { kind = "activation", type = "Seq", id = "s1", node = "n2",
              act = "b", start = 60, ["end"] = 70, replies = 2 },
        }, acts)
    end)

    it("gives no record where the calls leave no sure span", function()
        assert.same({}, activations.build({
            who(0, 10, "n1", "a"),                       -- one reply
            who(0, 50, "n2", "b"), who(10, 20, "n2", "b"), -- overlapping
            who(0, nil, nil, nil, "unknown"),
            { kind = "cas", type = "Seq", id = "s1", start = 0,
              ["end"] = 1, outcome = "ok", value = { node = "n3",
              act = "c" } },
        }))
    end)

    it("tells apart two activations with one id on two nodes", function()
        local acts = activations.build({
            who(0, 10, "n1", "a"), who(20, 30, "n1", "a"),
            who(0, 10, "n2", "a"), who(20, 30, "n2", "a"),
        })
        assert.equal(2, #acts)
    end)

    it("are checked: two activations answering at once outside every "
       .. "fault is a violation, inside a fault is not", function()
        local calls = {
            who(0, 10, "n1", "a"), who(100, 110, "n1", "a"),
            who(50, 60, "n2", "b"), who(150, 160, "n2", "b"),
        }
        local history = {}
        for _, c in ipairs(calls) do history[#history + 1] = c end
        for _, a in ipairs(activations.build(calls)) do
            history[#history + 1] = a
        end
        local report = checker.check(history, {})
        assert.equal(1, #report.violations)
        assert.equal("single_activation", report.violations[1].check)
        assert.matches("from 60 to 100", report.violations[1].message)
        history[#history + 1] = { kind = "fault", fault = "reload",
                                  start = 55, ["end"] = 100 }
        assert.is_true(checker.check(history, {}).ok)
        -- one activation after the other passes without a fault
        local seq = { who(0, 10, "n1", "a"), who(20, 30, "n1", "a"),
                      who(40, 50, "n2", "b"), who(60, 70, "n2", "b") }
        for _, a in ipairs(activations.build(seq)) do seq[#seq + 1] = a end
        assert.is_true(checker.check(seq, {}).ok)
    end)
end)

describe("the Seq fixture's who", function()
    local seq = dofile("spec/fixtures/seq.lua")

    local function ctx(name)
        local c = { node = name }
        function c.reply(self, v) self.replied = v end
        function c.now() return 12.5 end
        return c
    end

    it("answers the node and one id per activation", function()
        local a, b = seq.init(), seq.init()
        local c = ctx("n1")
        seq.receive(a, { type = "who" }, c)
        local first = c.replied
        assert.equal("n1", first.node)
        assert.is_string(first.act)
        seq.receive(a, { type = "seq", sender = "x", g = 1, n = 1 }, c)
        seq.receive(a, { type = "who" }, c)
        assert.same(first, c.replied)
        seq.receive(b, { type = "who" }, c)
        assert.not_equal(first.act, c.replied.act)
    end)
end)

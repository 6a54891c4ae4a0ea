-- The idle collector (runtime/node/node.c on_gc_tick, ms_bridge_gc_step in
-- runtime/lua/vm.c): when the loop has had no round for 50 ms, the node
-- runs collector steps between messages. A step runs finalizers, and
-- LuaJIT passes a finalizer's error on to whoever ran the step: in a
-- handler, that handler's error; in the idle step, outside any handler,
-- the step must catch it (G7), not let it reach the panic function that
-- ends the process.

local helpers = require "helpers.node"

-- {type = "litter"} leaves a cdata whose ffi.gc finalizer fails (after
-- noting that it ran); {type = "get"} replies whether one ran.
local FINAL = [[
local ffi = require "ffi"
local ran = false
local M = {}
function M.init() return {} end
function M.receive(_, msg, ctx)
    if msg.type == "litter" then
        ffi.gc(ffi.new("int[1]"), function()
            ran = true
            error("this finalizer fails")
        end)
        ctx:reply({ ok = true })
    else
        ctx:reply({ ran = ran })
    end
end
return M
]]

describe("the idle collector", function()
    after_each(function() helpers.stop_all() end)

    it("keeps the node up when a finalizer it runs fails", function()
        local n = helpers.start({ entities = { Final = { module = "final" } },
                                  files = { ["final.lua"] = FINAL } })
        assert.equal(200, (n:http("POST", "/v1/entities/Final/f1/ask",
                                  '{"type":"litter"}', { max_time = 5 })))
        -- idle: the node's own steps collect the cdata and run its
        -- finalizer (nothing else runs Lua meanwhile)
        helpers.sleep(1.5)
        assert.is_true(helpers.pid_alive(n.proc.pid), "the node ended")
        local status, body = n:http("POST", "/v1/entities/Final/f1/ask",
                                    '{"type":"get"}', { max_time = 5 })
        assert.equal(200, status)
        assert.is_true(body.ran, "no finalizer ran: the spec saw nothing")
    end)
end)

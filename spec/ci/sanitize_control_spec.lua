-- spec/ci/sanitize_control_spec.lua: the control step of .ci/sanitize
-- (run by it only, against the sanitizer build; in no busted layer).
-- It shows that the sanitizers work in a node on this machine: a behavior
-- that leaks 64 bytes through the FFI, and one that frees a block twice,
-- must each end their node with SIGABRT (abort_on_error), and
-- .ci/sanitize then expects a LeakSanitizer and an AddressSanitizer
-- report among the files of this step. A run where they do not (LSan
-- unable to stop the process's threads, options not reaching the node)
-- fails here instead of passing every other step for nothing.
local helpers = require "helpers.node"

local SIGABRT = 6

local BAD = [[
local ffi = require "ffi"
ffi.cdef("void *malloc(size_t); void free(void *);")
local M = {}
function M.init() return {} end
function M.receive(_, msg, ctx)
    local p = ffi.C.malloc(64) -- the ASan build's malloc
    if msg.type == "double_free" then
        ffi.C.free(p)
        ffi.C.free(p)
    end
    ctx:reply({ ok = true }) -- "leak": p is dropped, never freed
end
return M
]]

describe("the sanitizer build (.ci/sanitize control)", function()
    after_each(function() helpers.stop_all() end)

    it("reports a leak at the node's clean exit, by SIGABRT", function()
        local n = helpers.start({ entities = { Bad = { module = "bad" } },
                                  files = { ["bad.lua"] = BAD } })
        assert.equal(200, (n:http("POST", "/v1/entities/Bad/b1/ask",
                                  '{"type":"leak"}', { max_time = 5 })))
        local code, sig = n:stop(20)
        assert.equal(SIGABRT, sig, "exit code " .. tostring(code))
    end)

    it("aborts the node at a double free", function()
        local n = helpers.start({ entities = { Bad = { module = "bad" } },
                                  files = { ["bad.lua"] = BAD } })
        n:http("POST", "/v1/entities/Bad/b1/ask", '{"type":"double_free"}',
               { max_time = 5 })
        assert.is_true(n.proc:wait(10))
        assert.equal(SIGABRT, n.proc.signal)
    end)
end)

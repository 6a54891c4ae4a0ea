-- A type with `remember` (issue 12) is checked by the config, but this
-- build does not record or restart its entities yet: the node says so at
-- start, once per such type, and serves the type as an ordinary one.

local helpers = require "helpers.node"

describe("a type with remember settings", function()
    teardown(function() helpers.stop_all_checked() end)

    it("is served, and the node warns that it is not remembered yet",
       function()
        local n = helpers.start({
            entities = {
                Counter = { module = "counter",
                            remember = { store = "memory" } },
                Plain = { module = "counter" },
            },
        })
        n:tell("Counter", "c1", { type = "incr" })
        assert.same({ value = 1 }, n:call("Counter", "c1", { type = "get" }))
        local log = n:log()
        local _, count = log:gsub("remember%-entities are not built", "")
        assert.equal(1, count, log)
        assert.truthy(log:find('type=Counter msg="remember-entities are '
                               .. 'not built', 1, true), log)
        helpers.stop_all_checked()
    end)
end)

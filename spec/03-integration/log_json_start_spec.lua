-- log_format = "json" (issue 15, item 6): once the config is read, every
-- line on stderr is a JSON object, the lines of a start that fails (a port
-- in use) too.

local helpers = require "helpers.node"

local json = helpers.json

describe("JSON log lines of a failed start", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("says that the port is in use as a JSON object", function()
        local n = helpers.start({
            settings = { log_format = "json" },
            entities = { Counter = { module = "counter" } },
        })
        -- a second process on the same config: its ports are taken
        local err_path = n.dir .. "/second.err"
        local p = helpers.spawn({ helpers.bin, "node", n.config },
                                { stdout = n.dir .. "/second.out",
                                  stderr = err_path })
        helpers.wait_until(function() return p:poll() end, 10,
                           "the second node to exit")
        assert.equal(1, p.code)
        local f = assert(io.open(err_path, "rb"))
        local text = f:read("*a")
        f:close()
        local saw_port = false
        for line in text:gmatch("([^\n]*)\n") do
            local rec = json.decode(line)
            assert.is_table(rec, "not a JSON object: " .. line)
            if rec.msg and rec.msg:find("cannot listen", 1, true) then
                saw_port = true
                assert.equal("ERROR", rec.level)
            end
        end
        assert.is_true(saw_port, text)
    end)
end)

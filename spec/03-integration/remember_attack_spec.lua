-- Attacks on the remember-entities wiring (issue 12 review): inputs and
-- sizes the first specs did not try.

local helpers = require "helpers.node"
local cjson = require "cjson"

-- helpers.wait_until with the arguments in this file's order
local function wait_for(what, fn, timeout)
    return helpers.wait_until(fn, timeout or 10, what, 0.05)
end

local function keeper(shards, out)
    return {
        entities = {
            Keeper = { module = "keeper", shard_count = shards,
                       remember = { store = "memory" } },
        },
        files = { ["keeper_out.lua"] = string.format("return %q", out) },
    }
end

local function owned(n)
    local c = 0
    for _, s in ipairs(n:allocations("Keeper").shards or {}) do
        if s.owner and s.owner ~= "" and s.owner ~= cjson.null then
            c = c + 1
        end
    end
    return c
end

describe("remember-entities under attack", function()
    local dir
    before_each(function() dir = helpers.tmpdir() end)
    after_each(function() helpers.stop_all_checked() end)

    -- The node used to ask the coordinator for all 65,536 shards at once;
    -- the strategy then built a view of the whole plan for each one, and
    -- the loop was held for minutes: no /v1/health, no message.
    it("a remembered type of 65,536 shards leaves the node responsive",
       function()
        local n = helpers.start(keeper(65536, dir .. "/starts.log"))
        for i = 1, 5 do
            local reply = n:call("Keeper", "k" .. i, { type = "get" }, 5)
            assert.equal("k" .. i, reply.id)
        end
        -- and it goes on answering while the type fills
        for _ = 1, 10 do
            local status = n:http("GET", "/v1/health", nil, { max_time = 2 })
            assert.equal(200, status)
            helpers.sleep(0.2)
        end
        assert.is_true(owned(n) > 0)
    end)

    -- The file store answers errno codes, which the node printed as
    -- "unknown error".
    it("a file store whose dir cannot be opened stops the node with "
       .. "the cause", function()
        local file = dir .. "/a-file"
        assert(io.open(file, "w")):close()
        local o = keeper(8, dir .. "/starts.log")
        o.entities.Keeper.remember = { store = "file", dir = file .. "/x" }
        local config = helpers.write_config(o, helpers.free_port(),
                                            helpers.free_port())
        local log = dir .. "/node.log"
        local proc = helpers.spawn({ helpers.bin, "node", config },
                                   { stdout = log, stderr = "stdout" })
        wait_for("the node to exit", function() return proc:poll() end)
        assert.is_not.equal(0, proc.code)
        local text = helpers.read_file(log) or ""
        assert.truthy(text:find("entities.Keeper.remember.dir", 1, true),
                      text)
        assert.truthy(text:lower():find("not a directory", 1, true), text)
    end)

    it("a remembered type of 512 shards is still allocated without "
       .. "a message", function()
        local n = helpers.start(keeper(512, dir .. "/starts.log"))
        wait_for("every shard to have an owner",
                 function() return owned(n) == 512 end, 10)
    end)
end)

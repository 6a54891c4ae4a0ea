-- Graceful stop: SIGTERM passivates every active entity (their `stopped`
-- runs; the fixtures append a line to a file named in a message) and the
-- process exits 0. Each test starts and stops its own node.

local helpers = require "helpers.node"

local ENTITIES = {
    Journal = { module = "journal", idle_timeout = false },
    Probe = { module = "probe", idle_timeout = 60 },
    Sticky = { module = "probe", idle_timeout = false },
    Sleeper = { module = "sleeper" },
}

-- The sorted lines of a file ({} when it does not exist).
local function lines(path)
    local list = {}
    for line in (helpers.read_file(path) or ""):gmatch("[^\n]+") do
        list[#list + 1] = line
    end
    table.sort(list)
    return list
end

describe("graceful stop", function()
    after_each(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("calls stopped for every active entity on SIGTERM and exits 0",
       function()
        local n = helpers.start({ entities = ENTITIES })
        local file = helpers.tmpdir() .. "/stopped.txt"
        for _, e in ipairs({ { "Probe", "p1" }, { "Probe", "p2" },
                             { "Sticky", "s1" } }) do
            n:call(e[1], e[2], { type = "watch", file = file })
        end
        assert.same({}, lines(file))
        local code, signal = n:stop(10)
        assert.is_nil(signal)
        assert.equal(0, code, n:log())
        assert.is_false(n.proc.killed or false)
        assert.is_false(helpers.pid_alive(n.pid))
        assert.same({ "stopped Probe p1", "stopped Probe p2",
                      "stopped Sticky s1" }, lines(file))
    end)

    it("stops an entity suspended in an ask on SIGTERM and exits 0",
       function()
        local n = helpers.start({ entities = ENTITIES })
        local file = helpers.tmpdir() .. "/stopped.txt"
        -- a client whose ask stays pending: the sleeper naps for 30 s
        local dir = helpers.tmpdir()
        local client = helpers.spawn({
            "curl", "-s", "-S", "--max-time", "20", "-X", "POST",
            "-d", helpers.json.encode({ type = "nap", seconds = 30,
                                        file = file }),
            n.base .. helpers.entity_path("Sleeper", "z1", "ask"),
        }, { stdout = dir .. "/out", stderr = dir .. "/err" })
        helpers.wait_until(function()
            return n:stats().asks_started >= 2 -- the HTTP ask + the nap's
        end, 5, "the nap to start")
        local t0 = helpers.now()
        local code, signal = n:stop(10)
        assert.is_nil(signal)
        assert.equal(0, code, n:log())
        assert.is_true(helpers.now() - t0 < 5, "the stop waited for the nap")
        assert.same({ "stopped Sleeper z1" }, lines(file))
        -- the client's connection ended with the node
        assert.is_true(client:wait(5))
        client:terminate(1)
    end)

    it("exits 0 on SIGTERM with no entity active", function()
        local n = helpers.start({ entities = ENTITIES })
        local code, signal = n:stop(10)
        assert.is_nil(signal)
        assert.equal(0, code, n:log())
    end)
end)

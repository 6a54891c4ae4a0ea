-- The reply of a remote ask leaves the owner when the handler replies
-- (G5, DESIGN §2): a handler that answers first and works on afterwards
-- does not hold its answer back, through another node as on the owner.
-- The handler below replies, then keeps the owner's loop busy until the
-- spec has seen the reply (a file appears) or for 8 s: an answer held
-- until the handler (or the dispatch round) ends reaches the asker only
-- after its 4 s deadline.

local helpers = require "helpers.node"

describe("a remote ask's reply", function()
    local c, n1, n2

    setup(function()
        c = helpers.cluster_up({
            size = 2,
            entities = {
                Spin = { module = "spin", shard_count = 8,
                         slow_handler_ms = 60000 },
            },
            settings = { stuck_handler_ms = 60000 },
        })
        n1, n2 = c:node("n1"), c:node("n2")
        -- 8 shards: without n2's registration they could all go to n1
        n1:wait_placed_on("Spin", "n2")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- An id of Spin whose shard n2 owns.
    local function id_on_n2()
        for i = 1, 200 do
            local id = "e" .. i
            n1:call("Spin", id, { type = "ping" })
            if n1:owner("Spin", id).owner == "n2" then
                return id
            end
        end
        error("no Spin id on n2 in 200 tries")
    end

    it("leaves the owner when the handler replies, not when it ends",
       function()
        local id = id_on_n2()
        local dir = helpers.tmpdir()
        local file = dir .. "/seen"
        local status, body, raw = n1:ask("Spin", id, {
            type = "reply_hold", file = file, max_ms = 8000 }, 4)
        helpers.write_file(file, "seen\n") -- the handler may end now
        assert.equal(200, status, raw)
        assert.same({ replied = true }, body)
        -- the owner serves on
        assert.same({ pong = true }, n2:call("Spin", id, { type = "ping" }))
    end)
end)

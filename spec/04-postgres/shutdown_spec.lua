-- spec/04-postgres/shutdown_spec.lua: a node stopped (SIGTERM) while its
-- persistent entities wait for the database (writes and recoveries in
-- flight, PostgreSQL down) answers every HTTP ask explicitly, 503
-- `cancelled` "the node is stopping", instead of closing the connection
-- without an answer, and exits at once; nothing was written.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

describe("a node stopped with persistent writes in flight", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("answers each waiting ask and exits", function()
        local db = "shutdown"
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Rogue = { module = "rogue", persistence = "events",
                          shard_count = 2 },
            },
            settings = { database = pg.database(srv, db) },
        })
        local n = c.nodes[1]
        pg.wait_migrated(n)
        n:call("Rogue", "s1", { type = "add", n = 1 })
        srv:pause()
        -- s1 writes, the others recover: all wait for the database
        local conns = {}
        for i = 1, 5 do
            local cn = assert(helpers.tcp_open(n.port))
            assert(cn:send(helpers.format_request(n.port, "POST",
                helpers.entity_path("Rogue", "s" .. i, "ask")
                .. "?timeout=30", { type = "add", n = 1 }, true)))
            conns[i] = cn
        end
        helpers.sleep(0.5)
        n:signal(helpers.SIGTERM)
        assert.is_true(n.proc:wait(20) ~= nil, "the node did not stop")
        assert.equal(0, n.proc.code)
        for i, cn in ipairs(conns) do
            local r = cn:read(5)
            cn:close()
            local status = tonumber(r:match("^HTTP/1%.%d (%d+)"))
            assert.equal(503, status, "ask " .. i .. ": " .. r)
            local body = helpers.json.decode(r:match("\r\n\r\n(.*)$"))
            assert.equal("cancelled", body.error.code, r)
        end
        srv:resume()
        assert.same({ "1" }, pg.query(srv, db, "SELECT count(*) FROM "
            .. "moonshard_events WHERE type = 'Rogue'"))
    end)
end)

-- spec/04-postgres/node_migrate_spec.lua: a node whose config has
-- `database` migrates the schema itself at start, in the background: two
-- nodes starting at once both get there with one version row; a node whose
-- database is down comes Up all the same, serves its in-memory types, says
-- why in /v1/stats (never with the password) and migrates once the server
-- is back.

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local cjson = require "cjson.safe"
local null = cjson.null

local query = pg.query

local function database_of(n)
    return n:get_json("/v1/stats").database
end

-- waits until the node reports the schema at version 2, connected
local function wait_migrated(n, timeout)
    return helpers.wait_until(function()
        local db = database_of(n)
        if db.connected == true and db.schema_version == 2
                and db.migrate_error == null then
            return db
        end
        return nil, cjson.encode(db)
    end, timeout or 20, "the schema at version 2")
end

describe("a node with `database`", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    it("migrates at start; two nodes at once, one version row", function()
        query(srv, "moonshard_test", "CREATE DATABASE node_mig")
        local ci = srv.conninfo:gsub("dbname=%S+", "dbname=node_mig")
        local c = helpers.cluster_up({
            size = 2,
            entities = { Counter = { module = "counter" } },
            settings = { database = ci },
        })
        for _, n in ipairs(c.nodes) do
            local db = wait_migrated(n)
            assert.is_true(db.configured)
        end
        assert.same({ "2" }, query(srv, "node_mig",
            "SELECT count(*) FROM moonshard_schema"))
        assert.same({ "1", "2" }, query(srv, "node_mig",
            "SELECT version FROM moonshard_schema ORDER BY version"))
        helpers.stop_all_checked()
    end)

    it("upgrades a database at version 1 at start, keeping its rows",
       function()
        query(srv, "moonshard_test", "CREATE DATABASE node_v1")
        local ci = srv.conninfo:gsub("dbname=%S+", "dbname=node_v1")
        local n = helpers.start({
            entities = { Counter = { module = "counter" } },
            settings = { database = ci },
        })
        wait_migrated(n)
        helpers.stop_all_checked()
        -- what version 1 had: version 2 taken off, a row in its tables
        query(srv, "node_v1", "DROP TABLE moonshard_remembered")
        query(srv, "node_v1", "DELETE FROM moonshard_schema WHERE version = 2")
        query(srv, "node_v1", "INSERT INTO moonshard_states (cluster, type, "
            .. "id, revision, epoch, state) VALUES ('c','T','x',4,1,'{}')")
        n = helpers.start({
            entities = { Counter = { module = "counter" } },
            settings = { database = ci },
        })
        wait_migrated(n)
        assert.same({ "1", "2" }, query(srv, "node_v1",
            "SELECT version FROM moonshard_schema ORDER BY version"))
        assert.same({ "x4" }, query(srv, "node_v1",
            "SELECT id || revision FROM moonshard_states"))
        assert.same({ "0" }, query(srv, "node_v1",
            "SELECT count(*) FROM moonshard_remembered"))
        helpers.stop_all_checked()
    end)

    it("comes Up with its database down, and migrates once it is back",
       function()
        query(srv, "moonshard_test", "CREATE DATABASE node_later")
        local ci = srv.conninfo:gsub("dbname=%S+", "dbname=node_later")
        local password = assert(ci:match("password=(%S+)"))
        srv:pause() -- nothing listens on its port now
        local n = helpers.start({
            entities = { Counter = { module = "counter" } },
            settings = { database = ci },
        })
        -- in-memory types do not wait for the database
        n:tell("Counter", "c1", { type = "incr", by = 2 })
        assert.same({ value = 2 }, n:call("Counter", "c1", { type = "get" }))
        local db = helpers.wait_until(function()
            local d = database_of(n)
            return d.migrate_error ~= null and d, tostring(d.migrate_error)
        end, 20, "a migrate_error")
        assert.is_true(db.configured)
        assert.is_false(db.connected)
        assert.equal(null, db.schema_version)
        assert.equal("string", type(db.migrate_error))
        assert.is_nil(db.migrate_error:find(password, 1, true))
        local _, _, raw = n:http("GET", "/v1/stats")
        assert.is_nil(raw:find(password, 1, true))
        assert.is_nil(n:log():find(password, 1, true))
        assert.truthy(n:alive())

        srv:resume()
        wait_migrated(n, 60)
        assert.same({ "2" }, query(srv, "node_later",
            "SELECT count(*) FROM moonshard_schema"))
        assert.same({ value = 2 }, n:call("Counter", "c1", { type = "get" }))
        assert.is_nil(n:log():find(password, 1, true))
        helpers.stop_all_checked()
    end)

    it("reports a schema newer than its own, and keeps serving", function()
        query(srv, "moonshard_test", "CREATE DATABASE node_newer")
        query(srv, "node_newer", "CREATE TABLE moonshard_schema (version "
            .. "integer PRIMARY KEY, applied_at timestamptz NOT NULL "
            .. "DEFAULT now()); INSERT INTO moonshard_schema VALUES (1), (2),"
            .. " (3)")
        local ci = srv.conninfo:gsub("dbname=%S+", "dbname=node_newer")
        local n = helpers.start({
            entities = { Counter = { module = "counter" } },
            settings = { database = ci },
        })
        local db = helpers.wait_until(function()
            local d = database_of(n)
            return d.migrate_error ~= null and d, cjson.encode(d)
        end, 20, "a migrate_error")
        assert.equal(3, db.schema_version)
        assert.truthy(db.migrate_error:find("newer", 1, true),
                      db.migrate_error)
        assert.same({ value = 0 }, n:call("Counter", "c2", { type = "get" }))
        -- nothing was changed
        assert.same({ "1", "2", "3" }, query(srv, "node_newer",
            "SELECT version FROM moonshard_schema ORDER BY version"))
        assert.same({ "0" }, query(srv, "node_newer",
            "SELECT count(*) FROM pg_tables WHERE tablename = "
            .. "'moonshard_leases'"))
        helpers.stop_all_checked()
    end)

    -- a wrong password and a missing database: the node comes Up, says
    -- why (never with the password) and keeps serving its in-memory types
    for _, case in ipairs({
        { "a wrong password", function(ci)
            return (ci:gsub("password=%S+", "password=pw-wrong-5e1f0a"))
        end, "password authentication failed", "pw-wrong-5e1f0a" },
        { "a missing database", function(ci)
            return (ci:gsub("dbname=%S+", "dbname=no_such_db"))
        end, 'database "no_such_db" does not exist' },
    }) do
        it("reports " .. case[1] .. " clearly and keeps serving", function()
            local ci = case[2](srv.conninfo)
            local n = helpers.start({
                entities = { Counter = { module = "counter" } },
                settings = { database = ci },
            })
            local db = helpers.wait_until(function()
                local d = database_of(n)
                return d.migrate_error ~= null and d, cjson.encode(d)
            end, 20, "a migrate_error")
            assert.is_false(db.connected)
            assert.truthy(db.migrate_error:find(case[3], 1, true),
                          db.migrate_error)
            local secret = case[4] or assert(ci:match("password=(%S+)"))
            assert.is_nil(db.migrate_error:find(secret, 1, true))
            assert.is_nil(n:log():find(secret, 1, true))
            n:tell("Counter", "w1", { type = "incr" })
            assert.same({ value = 1 }, n:call("Counter", "w1",
                                              { type = "get" }))
            assert.truthy(n:alive())
            helpers.stop_all_checked()
        end)
    end

    it("says {configured = false} without `database`", function()
        local n = helpers.start({
            entities = { Counter = { module = "counter" } },
        })
        assert.same({ configured = false }, database_of(n))
        helpers.stop_all_checked()
    end)
end)

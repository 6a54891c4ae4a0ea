-- spec/04-postgres/migrate_spec.lua: `moonshard db migrate CONFIG` creates
-- the runtime's schema (runtime/io/pg_schema.c) in a throwaway PostgreSQL,
-- does nothing the second time, lets two runs started at once both succeed
-- with one version row, and fails with a clear message that never shows the
-- password when the database cannot be used.

local pg = require "helpers.pg"

local BIN = os.getenv("MOONSHARD_BIN") or "build/moonshard"

local TABLES = {
    moonshard_events = { "cluster", "type", "id", "sequence", "epoch",
                         "payload", "created_at" },
    moonshard_leases = { "cluster", "type", "shard", "owner", "epoch",
                         "expires_at" },
    moonshard_operations = { "cluster", "type", "id", "op_id", "reply",
                             "created_at" },
    moonshard_remembered = { "cluster", "type", "shard", "id", "since" },
    moonshard_schema = { "version", "applied_at" },
    moonshard_snapshots = { "cluster", "type", "id", "sequence", "epoch",
                            "state", "created_at" },
    moonshard_states = { "cluster", "type", "id", "revision", "epoch",
                         "state", "updated_at" },
}

local files = {}

local function sh_quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- a config file with `database` (a Lua expression, or nil: none)
local function write_config(database)
    local path = os.tmpname()
    files[#files + 1] = path
    local f = assert(io.open(path, "w"))
    f:write("return {\n    cluster = \"mig\",\n",
            "    secret = \"spec-secret-7f3a9c2e41b8\",\n",
            database and ("    database = " .. database .. ",\n") or "",
            "    nodes = { { name = \"a\", listen = \"127.0.0.1:17301\",\n",
            "                http = \"127.0.0.1:17380\" } },\n",
            "    entities = { Counter = { module = \"counter\" } },\n}\n")
    f:close()
    return path
end

-- the exit code and the output (stdout and stderr) of `db migrate`
local function migrate(config)
    local f = io.popen(BIN .. " db migrate " .. sh_quote(config)
                       .. " 2>&1; echo \"rc=$?\"")
    local out = f:read("*a")
    f:close()
    local rc = tonumber(out:match("rc=(%d+)\n$"))
    return rc, (out:gsub("rc=%d+\n$", ""))
end

local function password_of(conninfo)
    return assert(conninfo:match("password=(%S+)"))
end

local query = pg.query

describe("moonshard db migrate", function()
    local srv

    setup(function() srv = pg.start() end)
    teardown(function()
        pg.stop_all()
        for _, p in ipairs(files) do os.remove(p) end
    end)

    it("creates every table and the version row, then applies nothing", function()
        query(srv, "moonshard_test", "CREATE DATABASE mig_once")
        local ci = srv.conninfo:gsub("dbname=%S+", "dbname=mig_once")
        local config = write_config(string.format("%q", ci))
        local rc, out = migrate(config)
        assert.equal(0, rc, out)
        assert.equal("schema at version 2 (applied 2)\n", out)
        for name, cols in pairs(TABLES) do
            local got = query(srv, "mig_once", "SELECT column_name FROM "
                .. "information_schema.columns WHERE table_name = '"
                .. name .. "' ORDER BY ordinal_position")
            assert.same(cols, got, name)
        end
        assert.same({ "1", "2" }, query(srv, "mig_once",
            "SELECT version FROM moonshard_schema ORDER BY version"))
        -- the keys the runtime relies on: one lease per shard, one event
        -- per sequence of an entity
        query(srv, "mig_once", "INSERT INTO moonshard_events (cluster, type,"
            .. " id, sequence, epoch, payload) VALUES ('c','T','x',1,1,'{}')")
        local rows, err = pg.psql({ conninfo = ci }, "INSERT INTO "
            .. "moonshard_events (cluster, type, id, sequence, epoch, payload)"
            .. " VALUES ('c','T','x',1,2,'{}')")
        assert.is_nil(rows)
        assert.truthy(err:find("duplicate key", 1, true), err)
        rows, err = pg.psql({ conninfo = ci }, "INSERT INTO moonshard_leases"
            .. " VALUES ('c','T',0,'a',1,now()), ('c','T',0,'b',2,now())")
        assert.is_nil(rows)
        assert.truthy(err:find("duplicate key", 1, true), err)
        -- one row per remembered id of a shard
        query(srv, "mig_once", "INSERT INTO moonshard_remembered (cluster,"
            .. " type, shard, id) VALUES ('c','T',0,'x')")
        rows, err = pg.psql({ conninfo = ci }, "INSERT INTO "
            .. "moonshard_remembered (cluster, type, shard, id) VALUES "
            .. "('c','T',0,'x')")
        assert.is_nil(rows)
        assert.truthy(err:find("duplicate key", 1, true), err)

        -- again: nothing to do, nothing changed
        rc, out = migrate(config)
        assert.equal(0, rc, out)
        assert.equal("schema at version 2 (applied 0)\n", out)
        assert.same({ "2" }, query(srv, "mig_once",
            "SELECT count(*) FROM moonshard_schema"))
        assert.same({ "1" }, query(srv, "mig_once",
            "SELECT count(*) FROM moonshard_events"))
    end)

    it("lets two runs started at once both succeed, one applying", function()
        for round = 1, 3 do
            local db = "mig_race" .. round
            query(srv, "moonshard_test", "CREATE DATABASE " .. db)
            local config = write_config(string.format("%q",
                (srv.conninfo:gsub("dbname=%S+", "dbname=" .. db))))
            local out1, out2 = os.tmpname(), os.tmpname()
            files[#files + 1], files[#files + 2] = out1, out2
            local cmd = BIN .. " db migrate " .. sh_quote(config)
            local f = io.popen(string.format(
                "(%s >%s 2>&1; echo $? >>%s) & (%s >%s 2>&1; echo $? >>%s) &"
                .. " wait", cmd, out1, out1, cmd, out2, out2))
            f:read("*a")
            f:close()
            local outs = {}
            for i, p in ipairs({ out1, out2 }) do
                local h = assert(io.open(p))
                outs[i] = h:read("*a")
                h:close()
            end
            table.sort(outs)
            assert.same({ "schema at version 2 (applied 0)\n0\n",
                          "schema at version 2 (applied 2)\n0\n" }, outs)
            assert.same({ "1,2" }, query(srv, db, "SELECT string_agg("
                .. "version::text, ',' ORDER BY version) FROM "
                .. "moonshard_schema"))
        end
    end)

    it("upgrades a database at version 1 and keeps its rows", function()
        query(srv, "moonshard_test", "CREATE DATABASE mig_v1")
        local config = write_config(string.format("%q",
            (srv.conninfo:gsub("dbname=%S+", "dbname=mig_v1"))))
        assert.equal(0, (migrate(config)))
        -- what version 1 had: version 2 taken off, rows in its tables
        query(srv, "mig_v1", "DROP TABLE moonshard_remembered")
        query(srv, "mig_v1", "DELETE FROM moonshard_schema WHERE version = 2")
        query(srv, "mig_v1", "INSERT INTO moonshard_events (cluster, type, "
            .. "id, sequence, epoch, payload) VALUES ('c','T','x',1,1,'{}')")
        query(srv, "mig_v1", "INSERT INTO moonshard_leases VALUES "
            .. "('c','T',0,'a',3,now())")
        local rc, out = migrate(config)
        assert.equal(0, rc, out)
        assert.equal("schema at version 2 (applied 1)\n", out)
        assert.same({ "1,2" }, query(srv, "mig_v1", "SELECT string_agg("
            .. "version::text, ',' ORDER BY version) FROM moonshard_schema"))
        assert.same({ "x|{}" }, query(srv, "mig_v1",
            "SELECT id || '|' || payload FROM moonshard_events"))
        assert.same({ "a3" }, query(srv, "mig_v1",
            "SELECT owner || epoch FROM moonshard_leases"))
        assert.same({ "0" }, query(srv, "mig_v1",
            "SELECT count(*) FROM moonshard_remembered"))
    end)

    it("refuses a schema newer than the binary and changes nothing", function()
        query(srv, "moonshard_test", "CREATE DATABASE mig_newer")
        local config = write_config(string.format("%q",
            (srv.conninfo:gsub("dbname=%S+", "dbname=mig_newer"))))
        assert.equal(0, (migrate(config)))
        query(srv, "mig_newer", "INSERT INTO moonshard_schema VALUES (3, now())")
        local rc, out = migrate(config)
        assert.equal(1, rc, out)
        assert.truthy(out:find("schema is at version 3, newer than this "
            .. "moonshard's (2)", 1, true), out)
        assert.same({ "1,2,3" }, query(srv, "mig_newer", "SELECT string_agg("
            .. "version::text, ',' ORDER BY version) FROM moonshard_schema"))
    end)

    describe("fails with exit 1 and never shows the password", function()
        local function fails(database, expect)
            local rc, out = migrate(write_config(database))
            assert.equal(1, rc, out)
            assert.truthy(out:find(expect, 1, true), out)
            assert.falsy(out:find(password_of(srv.conninfo), 1, true), out)
            assert.falsy(out:find("pw-9d3e71c5", 1, true), out)
            assert.falsy(out:find("schema at version", 1, true), out)
            return out
        end

        it("when the server cannot be reached", function()
            -- port 1 of 127.0.0.1: nothing listens there
            fails(string.format("%q", (srv.conninfo:gsub("port=%d+",
                "port=1"))), "Connection refused")
            fails([["postgresql://ms:pw-9d3e71c5@127.0.0.1:1/moonshard_test"]],
                  "Connection refused")
        end)

        it("when the password is wrong", function()
            local out = fails(string.format("%q", (srv.conninfo:gsub(
                "password=%S+", "password=pw-9d3e71c5"))),
                "password authentication failed")
            assert.truthy(out:find("password='***'", 1, true), out)
        end)

        it("when the database does not exist", function()
            fails(string.format("%q", (srv.conninfo:gsub("dbname=%S+",
                "dbname=no_such_db"))), 'database "no_such_db" does not exist')
        end)

        it("when libpq cannot parse it, without quoting any of it", function()
            -- libpq's own message would quote the word after the space
            fails([["host=127.0.0.1 password=pw-1 pw-9d3e71c5 dbname=x"]],
                  "libpq cannot parse it")
            fails([["postgresql://ms:pw-9d3e71c5@127.0.0.1:1/x?pw-9d3e71c5=1"]],
                  "libpq cannot parse it")
        end)

        it("when the config has no database", function()
            fails(nil, "has no `database`")
        end)

        it("when the database is not a string", function()
            fails([[{ "postgresql://ms:pw-9d3e71c5@127.0.0.1/x" }]],
                  "database: must be a non-empty string (got a table)")
        end)
    end)
end)

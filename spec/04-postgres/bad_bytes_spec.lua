-- spec/04-postgres/bad_bytes_spec.lua: what a persistent entity writes
-- and its id go into PostgreSQL `text`, which holds UTF-8 only. Bytes
-- that are not UTF-8 (the node's JSON passes them through) are refused
-- before the database with `invalid` (HTTP 400) saying so: nothing is
-- written, no database error is counted, the entity's memory does not
-- keep the refused events, and it goes on with its next message. Other
-- bad results of a command (a NaN, a function, a non-list, events that
-- are not tables) fail the message the same way, as handler errors.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local query = pg.query

describe("a persistent entity given bytes that are not UTF-8", function()
    local srv, n, db

    setup(function()
        srv = pg.start()
        db = "bad_bytes"
        local c = helpers.cluster_up({
            size = 1,
            entities = {
                Rogue = { module = "rogue", persistence = "events",
                          shard_count = 4, snapshot_every = 2 },
                Profile = { module = "profile", persistence = "state",
                            shard_count = 4 },
            },
            settings = { database = pg.database(srv, db) },
        })
        n = c.nodes[1]
        pg.wait_migrated(n)
    end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    local function sql(text)
        return query(srv, db, text)
    end

    local function db_errors()
        return n:stats().persistence.db_errors
    end

    local function refused(status, body, raw, what)
        assert.equal(400, status, raw)
        assert.equal("invalid", body.error.code, raw)
        assert.truthy(body.error.message:find("UTF-8", 1, true), raw)
        assert.truthy(body.error.message:find(what, 1, true), raw)
    end

    it("in an event: refused, nothing written or kept", function()
        assert.same({ total = 2, count = 1 },
                    n:call("Rogue", "u1", { type = "add", n = 2 }))
        -- snapshot_every = 2: the next event would also write a snapshot
        local status, body, raw = n:ask("Rogue", "u1", { type = "bad_utf8" })
        refused(status, body, raw, "event 1")
        assert.equal(0, db_errors())
        -- the refused event is not in memory: count and total as before
        assert.same({ total = 5, count = 2 },
                    n:call("Rogue", "u1", { type = "add", n = 3 }))
        assert.same({ "2" }, sql("SELECT count(*) FROM moonshard_events "
            .. "WHERE type = 'Rogue' AND id = 'u1'"))
    end)

    it("in a saved state: refused, nothing written or kept", function()
        n:call("Profile", "p1", { type = "set", key = "a", value = "ok" })
        local status, body, raw = n:ask("Profile", "p1",
            { type = "set", key = "b", value = "bad \255 byte" })
        refused(status, body, raw, "state")
        assert.equal(0, db_errors())
        assert.same({ fields = { a = "ok" } },
                    n:call("Profile", "p1", { type = "get" }))
        assert.same({ "1" }, sql("SELECT revision FROM moonshard_states "
            .. "WHERE type = 'Profile' AND id = 'p1'"))
    end)

    it("in its id: refused before any query", function()
        for _, t in ipairs({ "Rogue", "Profile" }) do
            local status, body, raw = n:ask(t, "id-\255\254", { type = "get" })
            refused(status, body, raw, "id")
        end
        -- a character cut short, an overlong form, a surrogate
        for _, id in ipairs({ "\226\130", "\192\175", "\237\160\128" }) do
            local status, body, raw = n:ask("Rogue", "x" .. id,
                                            { type = "add", n = 1 })
            refused(status, body, raw, "id")
        end
        assert.equal(0, db_errors())
        -- UTF-8 beyond ASCII is fine
        assert.same({ total = 1, count = 1 },
                    n:call("Rogue", "k\195\169-\240\159\152\128",
                           { type = "add", n = 1 }))
    end)

    it("other bad commands fail as handler errors; the entity goes on",
       function()
        local want = {
            nan = "NaN", fn = "function", scalar = "list of events",
            scalars = "not a table",
        }
        for t, text in pairs(want) do
            local status, body, raw = n:ask("Rogue", "u2", { type = t })
            assert.equal(500, status, raw)
            assert.equal("handler_error", body.error.code, raw)
            assert.truthy(body.error.message:find(text, 1, true), raw)
        end
        assert.same({ total = 1, count = 1 },
                    n:call("Rogue", "u2", { type = "add", n = 1 }))
        assert.equal(0, db_errors())
    end)
end)

-- spec/04-install/demo_spec.lua: the README's first command brings its
-- own PostgreSQL (issue 11, point 10). `.ci/pg start` gives a server on
-- 127.0.0.1 that the demo config can use, `.ci/pg stop` leaves no process
-- and no folder, a guard does the same once the owner is gone, and
-- `.ci/demo` stops its server (and its nodes) when it is stopped. The demo
-- itself runs on its fixed ports 7101..7103 / 7201..7203.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local format = string.format

local script = helpers.home .. "/.ci/pg"
local demo = helpers.home .. "/.ci/demo"
local config = helpers.home .. "/examples/demo/cluster.lua"

-- .ci/pg start [owner]: its four lines as a table, raises on failure
local function pg_start(owner)
    local argv = { script, "start" }
    if owner then argv[3] = tostring(owner) end
    local code, out, err = helpers.run(argv, 90)
    assert.are.equal(0, code, out .. err)
    local dir, port, pid, conninfo =
        out:match("^([^\n]+)\n(%d+)\n(%d+)\n([^\n]+)\n$")
    assert.is_truthy(dir, out)
    return { dir = dir, port = tonumber(port), pid = tonumber(pid),
             conninfo = conninfo }
end

local function gone(srv, kids)
    assert.is_false(pg.alive(srv.pid))
    for _, k in ipairs(kids) do assert.is_false(pg.alive(k)) end
    assert.is_false(helpers.exists(srv.dir))
end

describe(".ci/pg", function()
    local started = {}

    teardown(function()
        for _, srv in ipairs(started) do
            if helpers.exists(srv.dir) then
                helpers.run({ script, "stop", srv.dir }, 60)
            end
        end
        helpers.stop_all_checked()
        helpers.cleanup()
    end)

    it("starts a server the demo config uses, and stop removes it",
       function()
        local srv = pg_start()
        started[#started + 1] = srv
        assert.is_true(pg.alive(srv.pid))
        local kids = pg.children(srv.pid)
        assert.is_true(#kids > 0)
        assert.are.same({ "moonshard|moonshard|on" }, pg.psql(srv,
            "SELECT current_database(), current_user, "
            .. "current_setting('synchronous_commit')"))
        -- the connection string is in the folder too, for a second terminal
        assert.are.equal(srv.conninfo .. "\n",
                         helpers.read_file(srv.dir .. "/database"))
        -- the demo config takes it from MOONSHARD_DATABASE
        local code, out, err = helpers.run({ "env",
            "MOONSHARD_DATABASE=" .. srv.conninfo, helpers.bin, "db",
            "migrate", config }, 60)
        assert.are.equal(0, code, out .. err)
        assert.are.equal("schema at version 2 (applied 2)\n", out)
        code = helpers.run({ script, "stop", srv.dir }, 60)
        assert.are.equal(0, code)
        gone(srv, kids)
    end)

    it("is stopped by its guard once the owner is gone", function()
        local owner = helpers.spawn({ "sleep", "600" })
        local srv = pg_start(owner.pid)
        started[#started + 1] = srv
        assert.is_true(pg.alive(srv.pid))
        local kids = pg.children(srv.pid)
        owner:terminate(1)
        helpers.wait_until(function()
            return not helpers.exists(srv.dir) and not pg.alive(srv.pid)
        end, 30, "the guard to stop the server")
        gone(srv, kids)
    end)

    it("refuses to stop a folder it did not make", function()
        local dir = helpers.tmpdir()
        local code, _, err = helpers.run({ script, "stop", dir }, 20)
        assert.are.equal(1, code)
        assert.matches("not a folder made by .ci/pg start", err, 1, true)
        assert.is_true(helpers.exists(dir))
    end)
end)

describe(".ci/demo", function()
    teardown(function()
        helpers.stop_all_checked()
        helpers.cleanup()
    end)

    it("runs the cluster on its own PostgreSQL and stops both", function()
        local log = helpers.tmpdir() .. "/demo.log"
        local p = helpers.spawn({ "env", "MOONSHARD_DEMO_NO_BUILD=1",
                                  demo }, { stdout = log, stderr = "stdout" })
        local dir
        helpers.wait_until(function()
            dir = (helpers.read_file(log) or ""):match(
                "demo: PostgreSQL on 127%.0%.0%.1:%d+, folder (%S+)\n")
            return dir ~= nil
        end, 60, "the demo's PostgreSQL")
        local pm = tonumber(helpers.read_file(dir .. "/pid"))
        assert.is_true(pg.alive(pm))
        local stats
        helpers.wait_until(function()
            local code, out = helpers.run({ helpers.bin, "status", "--json",
                                            "--node", "127.0.0.1:7201" })
            stats = code == 0 and require("cjson").decode(out)
            return stats and stats.database
                and type(stats.database.schema_version) == "number"
        end, 60, "the demo's n1 to migrate its database")
        assert.are.equal(2, stats.database.schema_version)
        assert.is_true(stats.database.configured)
        -- the conninfo (its password) is not in what the demo printed
        local pw = helpers.read_file(dir .. "/database"):match(
            "password=(%S+)")
        assert.is_nil((helpers.read_file(log)):find(pw, 1, true))
        p:send_signal(2) -- SIGINT, as Ctrl-C
        assert.is_true(p:wait(60), "the demo stopped on SIGINT")
        assert.are.equal(130, p.code)
        assert.is_false(pg.alive(pm))
        assert.is_false(helpers.exists(dir))
        for _, port in ipairs({ 7201, 7202, 7203 }) do
            local code = helpers.run({ helpers.bin, "status", "--json",
                                       "--node", format("127.0.0.1:%d",
                                                        port) })
            assert.are_not.equal(0, code)
        end
    end)

    -- needs persistent types (issue 11's leases and persistent behaviors)
    it("keeps an Account's balance when the node holding it leaves",
       function()
        local log = helpers.tmpdir() .. "/demo.log"
        local p = helpers.spawn({ "env", "MOONSHARD_DEMO_NO_BUILD=1",
                                  demo }, { stdout = log, stderr = "stdout" })
        local dir
        helpers.wait_until(function()
            dir = (helpers.read_file(log) or ""):match(
                "demo: PostgreSQL on 127%.0%.0%.1:%d+, folder (%S+)\n")
            return dir ~= nil
        end, 60, "the demo's PostgreSQL")
        local function ask(port, body)
            local code, out, err = helpers.run({ helpers.bin, "ask",
                "--node", "127.0.0.1:" .. port, "Account", "spec-a1", body },
                30)
            return code, out, err
        end
        local code, out, err, _
        helpers.wait_until(function()
            code, out, err = ask(7201, '{"type":"open","owner":"ada"}')
            return code == 0
        end, 60, "the account to open")
        assert.matches('"ok":true', out)
        code, _, err = ask(7201, '{"type":"deposit","amount":1250}')
        assert.are.equal(0, code, err)
        code, out = ask(7201, '{"type":"withdraw","amount":99999}')
        assert.are.equal(0, code)
        assert.matches('"error":"insufficient_funds"', out)
        local cjson = require "cjson"
        local _, owner_json = helpers.run({ "curl", "-s",
            "http://127.0.0.1:7201/v1/entities/Account/spec-a1/owner" })
        local owner = cjson.decode(owner_json).owner
        local k = tonumber(owner:match("^n(%d)$"))
        assert.is_truthy(k, owner_json)
        local other = 7200 + (k % 3) + 1
        code, out, err = helpers.run({ helpers.bin, "leave", "--node",
            "127.0.0.1:" .. (7200 + k), "--token", "demo-admin" })
        assert.are.equal(0, code, out .. err)
        helpers.wait_until(function()
            local c, o = helpers.run({ "curl", "-s", "http://127.0.0.1:"
                .. other .. "/v1/entities/Account/spec-a1/owner" })
            return c == 0 and o:find('"owner":"n', 1, true)
                and not o:find('"owner":"' .. owner .. '"', 1, true)
        end, 60, "the account's shard to move")
        code, out, err = ask(other, '{"type":"balance"}')
        assert.are.equal(0, code, err)
        assert.are.same({ owner = "ada", balance = 1250 }, cjson.decode(out))
        -- the journal, through the CLI, under the demo's database
        code, out, err = helpers.run({ "env", "MOONSHARD_DATABASE="
            .. helpers.read_file(dir .. "/database"):gsub("\n$", ""),
            helpers.bin, "db", "events", config, "Account", "spec-a1" })
        assert.are.equal(0, code, err)
        assert.matches("2 event%(s%), sequences 1..2", out)
        p:send_signal(2)
        assert.is_true(p:wait(60), "the demo stopped on SIGINT")
        assert.is_false(helpers.exists(dir))
    end)

    it("stops its PostgreSQL when the cluster fails to start", function()
        local log = helpers.tmpdir() .. "/demo.log"
        -- a secret the nodes refuse: `moonshard run` exits 1 at once
        local p = helpers.spawn({ "env", "MOONSHARD_DEMO_NO_BUILD=1",
                                  "MOONSHARD_SECRET=too-short", demo },
                                { stdout = log, stderr = "stdout" })
        assert.is_true(p:wait(90), "the demo ended on its own")
        local out = helpers.read_file(log)
        assert.are_not.equal(0, p.code)
        assert.matches("secret", out, 1, true)
        local dir = out:match("folder (%S+)\n")
        assert.is_truthy(dir, out)
        assert.matches("demo: stopping its PostgreSQL", out, 1, true)
        assert.is_false(helpers.exists(dir))
    end)
end)

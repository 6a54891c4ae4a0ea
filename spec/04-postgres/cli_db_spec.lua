-- spec/04-postgres/cli_db_spec.lua: `moonshard db events [CONFIG] TYPE
-- ID` prints an entity's journal and `moonshard leases [CONFIG]` (=
-- `moonshard db leases`) the leases of the config's cluster (issue 11,
-- point 9); without CONFIG, $MOONSHARD_CONFIG names it.
-- Rows are inserted by hand into a migrated throwaway database; the
-- errors (no database, unreachable, wrong password, no schema) are one
-- line on stderr, exit 1, and never show the password.

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local format = string.format

local BIN = helpers.bin

-- a config for cluster `cli` whose database is `database` (a string, or
-- nil: none)
local function config(database)
    local path = helpers.tmpdir() .. "/cluster.lua"
    helpers.write_file(path, format([[
return {
    cluster = "cli",
    secret = "spec-secret-7f3a9c2e41b8",
    %s
    nodes = { { name = "a", listen = "127.0.0.1:17311",
                http = "127.0.0.1:17391" } },
    entities = { Counter = { module = "counter" } },
}
]], database and ("database = " .. format("%q", database) .. ",") or ""))
    return path
end

local function run(...)
    local code, out, err = helpers.run({ BIN, ... }, 60)
    return code, out, err
end

-- the lines of s
local function lines(s)
    local t = {}
    for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
    return t
end

describe("moonshard db events / leases", function()
    local srv, cfg

    setup(function()
        srv = pg.start()
        cfg = config(srv.conninfo)
        local code, out, err = run("db", "migrate", cfg)
        assert.are.equal(0, code, out .. err)
        -- another cluster's rows must not show
        pg.query(srv, "moonshard_test", [[
INSERT INTO moonshard_leases VALUES
  ('cli', 'Account', 3, 'n1', 2, now() + interval '1 hour'),
  ('cli', 'Account', 1, 'n2', 7, now() - interval '1 hour'),
  ('cli', 'Cart', 0, 'node-b', 1, now() + interval '1 hour'),
  ('other', 'Account', 3, 'x', 9, now() + interval '1 hour');
INSERT INTO moonshard_events (cluster, type, id, sequence, epoch,
                              payload, created_at) VALUES
  ('cli', 'Account', 'a1', 1, 1, '{"type":"opened","owner":"ada"}',
   '2026-01-02 03:04:05.678+00'),
  ('cli', 'Account', 'a1', 2, 1, '{"type":"deposited","amount":1250}',
   '2026-01-02 03:04:06+00'),
  ('cli', 'Account', 'a1', 3, 2, '{"type":"withdrawn","amount":50}',
   '2026-01-02 03:04:07+00'),
  ('cli', 'Account', 'evil', 1, 1, E'{"x":"a\nb\u001b[2J"}',
   '2026-01-02 03:04:07+00'),
  ('other', 'Account', 'a1', 4, 9, '{"not":"mine"}', now());
INSERT INTO moonshard_snapshots (cluster, type, id, sequence, epoch,
                                 state, created_at) VALUES
  ('cli', 'Account', 'a1', 2, 1, '{"owner":"ada","balance":1250}',
   '2026-01-02 03:04:06.5+00');
SELECT 1;
]])
    end)

    teardown(function()
        pg.stop_all()
        helpers.cleanup()
    end)

    it("events prints the snapshot and the journal, oldest first", function()
        local code, out, err = run("db", "events", cfg, "Account", "a1")
        assert.are.equal(0, code, err)
        assert.are.equal("", err)
        assert.are.same({
            "entity Account a1 in cluster cli: 3 event(s), sequences 1..3",
            "snapshot  sequence 2  epoch 1  2026-01-02T03:04:06.500Z  "
                .. '{"owner":"ada","balance":1250}',
            "sequence   epoch   time                     payload",
            "1          1       2026-01-02T03:04:05.678Z "
                .. '{"type":"opened","owner":"ada"}',
            "2          1       2026-01-02T03:04:06.000Z "
                .. '{"type":"deposited","amount":1250}',
            "3          2       2026-01-02T03:04:07.000Z "
                .. '{"type":"withdrawn","amount":50}',
        }, lines(out))
    end)

    it("events --limit shows the latest N and says how many are hidden",
       function()
        local code, out = run("db", "events", cfg, "Account", "a1",
                              "--limit", "1")
        assert.are.equal(0, code)
        local l = lines(out)
        assert.are.equal("(2 earlier event(s) not shown: --limit 1)", l[3])
        assert.are.equal(5, #l)
        assert.matches("^3          2 ", l[5])
        code = run("db", "events", cfg, "Account", "a1", "--limit=2")
        assert.are.equal(0, code)
        -- options anywhere; after `--` an id may look like one
        code, out = run("db", "events", "--limit", "1", cfg, "--",
                        "Account", "--a1")
        assert.are.equal(0, code)
        assert.are.equal("entity Account --a1 in cluster cli: no events,"
                         .. " no snapshot\n", out)
    end)

    it("events on an entity without a journal says so", function()
        local code, out = run("db", "events", cfg, "Account", "nobody")
        assert.are.equal(0, code)
        assert.are.equal("entity Account nobody in cluster cli: no events,"
                         .. " no snapshot\n", out)
    end)

    it("writes control bytes of a payload as \\xHH, one line per event",
       function()
        local code, out = run("db", "events", cfg, "Account", "evil")
        assert.are.equal(0, code)
        local l = lines(out)
        assert.are.equal(3, #l)
        assert.are.equal('1          1       2026-01-02T03:04:07.000Z '
                         .. '{"x":"a\\x0ab\\x1b[2J"}', l[3])
        assert.is_nil(out:find("\27", 1, true))
    end)

    it("leases lists the cluster's leases, held or expired", function()
        local code, out, err = run("leases", cfg)
        assert.are.equal(0, code, err)
        local l = lines(out)
        assert.are.equal(5, #l, out)
        assert.matches("^type +shard +owner +epoch +expires_at +state$",
                       l[1])
        assert.matches("^Account +1 +n2 +7 +%S+Z expired [%d.]+ s ago$",
                       l[2])
        assert.matches("^Account +3 +n1 +2 +%S+Z held, expires in "
                       .. "[%d.]+ s$", l[3])
        assert.matches("^Cart +0 +node%-b +1 ", l[4])
        assert.are.equal("3 lease(s) in cluster cli: 2 held, 1 expired",
                         l[5])
        -- the same as `db leases`; a TYPE narrows it
        local code2, out2 = run("db", "leases", cfg)
        assert.are.equal(0, code2)
        assert.are.equal(#out, #out2)
        code, out = run("leases", cfg, "Cart")
        assert.are.equal(0, code)
        assert.are.equal(3, #lines(out))
        code, out = run("leases", cfg, "Nope")
        assert.are.equal(0, code)
        assert.are.equal("no leases in cluster cli for type Nope\n", out)
    end)

    it("takes the config from MOONSHARD_CONFIG when none is given",
       function()
        local function env_run(...)
            return helpers.run({ "env", "MOONSHARD_CONFIG=" .. cfg, BIN, ... },
                               60)
        end
        local code, out, err = env_run("db", "events", "Account", "a1")
        local c2, out2 = run("db", "events", cfg, "Account", "a1")
        assert.are.equal(0, code, err)
        assert.are.equal(0, c2)
        assert.are.equal(out2, out)
        code, out, err = env_run("leases")
        assert.are.equal(0, code, err)
        assert.are.equal(5, #lines(out), out)
        code, out = env_run("leases", "Cart")
        assert.are.equal(0, code)
        assert.are.equal(3, #lines(out))
        -- without it: said, with the usage, exit 2
        code, out, err = run("leases")
        assert.are.equal(2, code)
        assert.are.equal("", out)
        assert.matches("MOONSHARD_CONFIG is not set", err, 1, true)
    end)

    it("refuses bad arguments with its usage, exit 2", function()
        for _, argv in ipairs({ { "db", "events", cfg, "Account" },
                                { "db", "events", cfg, "A", "b", "c" },
                                { "db", "events", cfg, "A", "b", "--limit",
                                  "0" },
                                { "db", "events", cfg, "A", "b", "--limit",
                                  "100001" },
                                { "db", "events", cfg, "A", "b", "--limit" },
                                { "db", "events", cfg, "A", "b", "--nope" },
                                { "leases" },
                                { "leases", cfg, "A", "B" } }) do
            local code, out, err = run(unpack(argv))
            assert.are.equal(2, code, table.concat(argv, " "))
            assert.are.equal("", out)
            assert.matches("usage: moonshard ", err)
        end
    end)

    it("without a database in the config: one clear line, exit 1",
       function()
        local plain = config(nil)
        for _, argv in ipairs({ { "db", "events", plain, "A", "b" },
                                { "leases", plain } }) do
            local code, out, err = run(unpack(argv))
            assert.are.equal(1, code)
            assert.are.equal("", out)
            assert.are.equal(1, #lines(err))
            assert.matches("has no `database`", err, 1, true)
        end
    end)

    it("an unreachable server, a wrong password, a missing database or "
       .. "schema: one line, exit 1, no password", function()
        local pw = assert(srv.conninfo:match("password=(%S+)"))
        local cases = {
            { srv.conninfo:gsub("port=%d+", "port=1"), "Connection refused" },
            { srv.conninfo:gsub("password=%S+", "password=wrong-7f3a9c2e"),
              "password authentication failed" },
            { srv.conninfo:gsub("dbname=%S+", "dbname=nope"),
              'database "nope" does not exist' },
            { srv.conninfo:gsub("dbname=%S+", "dbname=postgres"),
              "has no moonshard schema (no table moonshard_" },
        }
        for _, c in ipairs(cases) do
            local bad = config(c[1])
            for _, argv in ipairs({ { "db", "events", bad, "A", "b" },
                                    { "leases", bad } }) do
                local code, out, err = run(unpack(argv))
                assert.are.equal(1, code, err)
                assert.are.equal("", out)
                assert.are.equal(1, #lines(err), err)
                assert.matches(c[2], err, 1, true)
                assert.is_nil(err:find(pw, 1, true))
                assert.is_nil(err:find("wrong-7f3a9c2e", 1, true))
                assert.matches("password='***'", err, 1, true)
            end
        end
    end)
end)

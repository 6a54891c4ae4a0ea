-- spec/04-postgres/opid_spec.lua: operation ids (issue 11 point 7). A
-- command sent again under the same operation id -- an HTTP
-- Idempotency-Key, the CLI's --op-id, a ref's op_id -- is applied once,
-- and an ask gets the reply stored with the first commit, also when the
-- first attempt timed out at the client and committed afterwards. The
-- ids are kept for operation_retention, then the same id applies again.

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local cjson = require "cjson.safe"

describe("an operation id", function()
    local srv, n

    setup(function()
        srv = pg.start()
        n = helpers.start({
            entities = {
                Ledger = { module = "ledger", persistence = "events",
                           lease_duration = 2, lease_renew_interval = 0.5 },
                Wallet = { module = "wallet", persistence = "state",
                           lease_duration = 2, lease_renew_interval = 0.5 },
                Asker = { module = "asker" },
                Counter = { module = "counter" },
            },
            settings = { database = pg.database(srv, "ops"),
                         operation_retention = 2 },
        })
    end)
    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
    end)

    local function ask_key(t, id, msg, key, timeout)
        local q = timeout and ("?timeout=" .. timeout) or ""
        return n:http("POST", "/v1/entities/" .. t .. "/" .. id .. "/ask"
                      .. q, msg, { headers = { ["Idempotency-Key"] = key } })
    end

    local function events_of(id)
        return tonumber(pg.query(srv, "ops", "SELECT count(*) FROM "
            .. "moonshard_events WHERE type = 'Ledger' AND id = '" .. id
            .. "'")[1])
    end

    it("applies an ask once and answers a retry with the first reply",
       function()
        local st, body, raw = ask_key("Ledger", "o1", { type = "deposit",
                                      amount = 10 }, "dep-1")
        assert.equal(200, st, raw)
        assert.same({ balance = 10 }, body)
        -- the state changed since: the retry still gets the first reply
        assert.equal(200, (ask_key("Ledger", "o1", { type = "deposit",
                                   amount = 5 }, "dep-2")))
        st, body = ask_key("Ledger", "o1", { type = "deposit", amount = 10 },
                           "dep-1")
        assert.equal(200, st)
        assert.same({ balance = 10 }, body)
        local s = n:call("Ledger", "o1", { type = "get" })
        assert.equal(15, s.balance)
        assert.equal(2, s.count)
        assert.equal(2, events_of("o1"))
        assert.same({ "2" }, pg.query(srv, "ops", "SELECT count(*) FROM "
            .. "moonshard_operations WHERE id = 'o1'"))
    end)

    it("applies once a command whose first attempt timed out at the client",
       function()
        -- the caller gives up after 1 ms; the command commits anyway
        local st = ask_key("Ledger", "o2", { type = "deposit", amount = 7 },
                           "slow-1", 0.001)
        assert.equal(504, st)
        local body
        st, body = ask_key("Ledger", "o2", { type = "deposit", amount = 7 },
                           "slow-1")
        assert.equal(200, st)
        assert.same({ balance = 7 }, body)
        assert.equal(7, n:call("Ledger", "o2", { type = "get" }).balance)
        assert.equal(1, events_of("o2"))
    end)

    it("applies a tell once", function()
        for _ = 1, 3 do
            local st = n:http("POST", "/v1/entities/Ledger/o3/tell",
                { type = "deposit", amount = 4 },
                { headers = { ["Idempotency-Key"] = "t-1" } })
            assert.equal(202, st)
        end
        helpers.wait_until(function()
            return n:call("Ledger", "o3", { type = "get" }).count == 1 or nil
        end, 10, "the first tell")
        helpers.sleep(0.3)
        assert.equal(4, n:call("Ledger", "o3", { type = "get" }).balance)
        assert.equal(1, events_of("o3"))
    end)

    it("applies a durable-state message once, and hides the id from the "
       .. "handler", function()
        for _ = 1, 2 do
            local st, body = ask_key("Wallet", "w1", { type = "add", by = 3 },
                                     "w-1")
            assert.equal(200, st)
            assert.same({ total = 3 }, body)
        end
        assert.same({ total = 3, op = false },
                    n:call("Wallet", "w1", { type = "get" }))
        -- an in-memory type ignores it (nothing to check it against)
        for _ = 1, 2 do
            assert.equal(202, (n:http("POST",
                "/v1/entities/Counter/c1/tell", { type = "incr" },
                { headers = { ["Idempotency-Key"] = "c-1" } })))
        end
        helpers.wait_until(function()
            return n:call("Counter", "c1", { type = "get" }).value == 2 or nil
        end, 10, "two increments")
    end)

    it("takes --op-id in the CLI", function()
        local env = { "env", "MOONSHARD_HOME=" .. helpers.home, helpers.bin }
        local function cli(...)
            local argv = {}
            for _, a in ipairs(env) do argv[#argv + 1] = a end
            for _, a in ipairs({ ... }) do argv[#argv + 1] = a end
            return helpers.must(argv, 20)
        end
        local out1 = cli("ask", "--node", n.address, "--op-id", "cli-1",
                         "Ledger", "o4", '{"type":"deposit","amount":2}')
        local out2 = cli("ask", "--node", n.address, "--op-id=cli-1",
                         "Ledger", "o4", '{"type":"deposit","amount":2}')
        assert.same(cjson.decode(out1), cjson.decode(out2))
        assert.equal(1, events_of("o4"))
    end)

    it("takes op_id in a ref's ask", function()
        local m = { type = "ask", target = { type = "Ledger", id = "o6" },
                    msg = { type = "deposit", amount = 6 }, op_id = "ref-1" }
        local a = n:call("Asker", "a1", m)
        local b = n:call("Asker", "a1", m)
        assert.same({ balance = 6 }, a.reply)
        assert.same(a.reply, b.reply)
        assert.equal(1, events_of("o6"))
        m.op_id = "bad key"
        local st, body = n:ask("Asker", "a1", m)
        assert.equal(500, st)
        assert.matches("op_id", body.error.message, 1, true)
    end)

    it("is kept for operation_retention, then applies again", function()
        assert.equal(200, (ask_key("Ledger", "o5", { type = "deposit",
                                   amount = 1 }, "ret-1")))
        helpers.wait_until(function()
            local rows = pg.query(srv, "ops", "SELECT count(*) FROM "
                .. "moonshard_operations WHERE op_id = 'ret-1'")
            return rows[1] == "0" or nil
        end, 15, "the id to expire")
        local st, body = ask_key("Ledger", "o5", { type = "deposit",
                                 amount = 1 }, "ret-1")
        assert.equal(200, st)
        assert.same({ balance = 2 }, body)
    end)
end)

-- The operator's clear of a shard that a remember-entities store failure
-- failed (issue 12, on_failure = "fail_closed"): POST
-- /v1/remember/clear/{type}/{shard} with the admin token, and `moonshard
-- remember clear TYPE SHARD`. The clear applies on the node that receives
-- it. No shard fails here (the memory store does not fail), so a clear of
-- a remembered type answers {"cleared":false}; the clears of failed shards
-- are in remember_file_spec and remember_fail_spec.

local helpers = require "helpers.node"

local json = helpers.json

local TOKEN = "spec-admin-token-5d1e8b77c0a2"

describe("remember clear", function()
    local n

    setup(function()
        n = helpers.start({
            entities = {
                Counter = { module = "counter", shard_count = 16,
                            remember = { store = "memory",
                                         on_failure = "fail_closed" } },
                Plain = { module = "counter", shard_count = 4 },
            },
            settings = { secret = "spec-secret-7f3a9c2e41b8",
                         admin_token = TOKEN },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    local function clear(path, token)
        return n:http("POST", "/v1/remember/clear/" .. path, nil,
                      { headers = token and { ["X-Moonshard-Token"] = token }
                                    or nil })
    end

    -- The CLI with neither $MOONSHARD_ADMIN_TOKEN nor $MOONSHARD_NODE.
    local function cli(...)
        return helpers.run({ "env", "-u", "MOONSHARD_ADMIN_TOKEN", "-u",
                             "MOONSHARD_NODE", helpers.bin, ... })
    end

    it("answers 200 cleared false for a shard not failed here", function()
        local status, body, raw = clear("Counter/3", TOKEN)
        assert.equal(200, status, raw)
        assert.is_false(body.cleared)
        assert.matches("not failed on this node", body.message, 1, true)
        -- the type name is percent-decoded; shard 0 is a shard
        status, body, raw = clear("Count%65r/0", TOKEN)
        assert.equal(200, status, raw)
        assert.is_false(body.cleared)
    end)

    it("answers 404 for an unknown type", function()
        local status, body, raw = clear("Nope/3", TOKEN)
        assert.equal(404, status, raw)
        assert.equal("unknown_type", body.error.code)
    end)

    it("answers 404 for a type that is not remembered, 400 for a shard "
       .. "out of range", function()
        local status, body, raw = clear("Plain/1", TOKEN)
        assert.equal(404, status, raw)
        assert.equal("not_remembered", body.error.code)
        status, body, raw = clear("Counter/16", TOKEN)
        assert.equal(400, status, raw)
        assert.equal("bad_request", body.error.code)
    end)

    it("answers 400 for a shard that is not a number", function()
        for _, shard in ipairs({ "x", "-1", "+1", "3x", "1.0", "",
                                 "4294967296", "3/4" }) do
            local status, body, raw = clear("Counter/" .. shard, TOKEN)
            assert.equal(400, status, shard .. ": " .. raw)
            assert.equal("bad_request", body.error.code)
        end
    end)

    it("answers 403 without the admin token, and 405 to a GET", function()
        local status, body = clear("Counter/3", nil)
        assert.equal(403, status)
        assert.equal("forbidden", body.error.code)
        status = clear("Counter/3", "not-the-token")
        assert.equal(403, status)
        status = n:http("GET", "/v1/remember/clear/Counter/3")
        assert.equal(405, status)
    end)

    it("from the CLI: prints the answer, exit 0", function()
        local code, out, err = cli("remember", "clear", "--node", n.address,
                                   "--token", TOKEN, "Counter", "3")
        assert.equal(0, code, out .. err)
        assert.is_false(json.decode(out).cleared)
        code, out, err = cli("remember", "clear", "--node=" .. n.address,
                             "--token=" .. TOKEN, "Counter", "0")
        assert.equal(0, code, out .. err)
        assert.is_false(json.decode(out).cleared)
    end)

    it("from the CLI: the node's refusals exit 1", function()
        local code, out, err = cli("remember", "clear", "--node", n.address,
                                   "--token", TOKEN, "Nope", "3")
        assert.equal(1, code, out .. err)
        assert.matches("error: 404 ", err, 1, true)
        assert.matches("unknown_type", err, 1, true)
        code, out, err = cli("remember", "clear", "--node", n.address,
                             "--token", "not-the-token", "Counter", "3")
        assert.equal(1, code, out .. err)
        assert.matches("error: 403 ", err, 1, true)
    end)

    it("from the CLI: a bad command line exits 2", function()
        for _, argv in ipairs({
            { "remember" },
            { "remember", "wipe", "Counter", "3" },
            { "remember", "clear", "--node", n.address, "Counter", "3" },
            { "remember", "clear", "--node", n.address, "--token", TOKEN,
              "Counter" },
            { "remember", "clear", "--node", n.address, "--token", TOKEN,
              "Counter", "x" },
            { "remember", "clear", "--node", n.address, "--token", TOKEN,
              "Counter", "3", "4" },
            { "remember", "clear", "--node", n.address, "--token", TOKEN,
              "--bogus", "Counter", "3" },
            { "remember", "clear", "Counter", "3", "--token" },
            { "remember", "clear", "--node", n.address, "--token", TOKEN,
              "", "3" },
        }) do
            local code, out, err = cli(unpack(argv))
            local line = table.concat(argv, " ")
            assert.equal(2, code, line .. ": " .. out .. err)
            assert.matches("usage: moonshard remember clear", err, 1, true)
        end
    end)

    it("from the CLI: the token may come from $MOONSHARD_ADMIN_TOKEN",
       function()
        local code, out, err = helpers.run({
            "env", "MOONSHARD_ADMIN_TOKEN=" .. TOKEN,
            "MOONSHARD_NODE=" .. n.address, helpers.bin, "remember",
            "clear", "Counter", "15" })
        assert.equal(0, code, out .. err)
        assert.is_false(json.decode(out).cleared)
    end)
end)

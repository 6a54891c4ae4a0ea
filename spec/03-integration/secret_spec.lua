-- Fail closed on trust (issue 9, G8): a node whose config lets it talk to
-- other nodes does not start without a secret, or with a weak one; before,
-- it fell back to a secret derived from the cluster name
-- ("moonshard-dev-secret:<cluster>") and an attacker who read the cluster
-- name joined with it. `moonshard secret` makes a good one. A node alone
-- without a secret makes up a random one of its own, so nobody can join
-- it with the old derived secret.

local helpers = require "helpers.node"

local ROGUE = helpers.bin:gsub("moonshard$", "rogue_peer")
local UNSET = "MOONSHARD_SPEC_UNSET_VAR_9"

-- A two-node config whose line 4 is `secret_line`; returns its path and
-- the HTTP port of n1.
local function two_node_config(secret_line)
    assert(os.getenv(UNSET) == nil, UNSET .. " must not be set")
    local dir = helpers.tmpdir()
    local port = helpers.free_port()
    local path = dir .. "/cluster.lua"
    helpers.write_file(path, table.concat({
        "-- two nodes",
        "return {",
        "    cluster = \"prod\",",
        "    " .. secret_line, -- line 4
        "    nodes = {",
        string.format("        { name = \"n1\", listen = \"127.0.0.1:%d\","
                      .. " http = \"127.0.0.1:%d\" },",
                      helpers.free_port(), port),
        string.format("        { name = \"n2\", listen = \"127.0.0.1:%d\","
                      .. " http = \"127.0.0.1:%d\" },",
                      helpers.free_port(), helpers.free_port()),
        "    },",
        "    entities = { Counter = { module = \"counter\" } },",
        "}",
    }, "\n") .. "\n")
    return path, port
end

-- Runs `moonshard ARGS...`, which must exit by itself within 10 s.
-- Returns its exit code and stderr.
local function run_to_exit(args)
    local dir = helpers.tmpdir()
    local argv = { helpers.bin }
    for _, a in ipairs(args) do
        argv[#argv + 1] = a
    end
    local p = helpers.spawn(argv, { stdout = dir .. "/out",
                                    stderr = dir .. "/err" })
    local exited = p:wait(10)
    if not exited then
        p:terminate(1)
    end
    assert.is_true(exited, "moonshard kept running")
    return p.code, helpers.read_file(dir .. "/err") or ""
end

describe("a node of a two-node config", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("refuses to start when its secret comes from an unset environment "
       .. "variable, naming file:line and the field", function()
        local path, port = two_node_config(
            "secret = os.getenv(\"" .. UNSET .. "\"),")
        local code, err = run_to_exit({ "node", path, "--name", "n1" })
        assert.is_not.equal(0, code)
        assert.matches(path .. ":4: secret: required when the config lists"
                       .. " more than one node", err, 1, true)
        assert.matches("moonshard secret", err, 1, true)
        -- nothing listens: it never started
        assert.is_not.equal(200, (helpers.request(port, "GET",
                                                  "/v1/health", nil,
                                                  { max_time = 0.5 })))
    end)

    it("refuses to start without a secret under `moonshard run` too",
       function()
        local path = two_node_config("-- no secret")
        local code, err = run_to_exit({ "run", path })
        assert.is_not.equal(0, code)
        -- no `secret` line: the line of `return {`
        assert.matches(path .. ":2: secret: required", err, 1, true)
    end)

    it("refuses to start with a short secret, without showing it",
       function()
        local path = two_node_config("secret = \"hunter2\",")
        local code, err = run_to_exit({ "node", path, "--name", "n1" })
        assert.is_not.equal(0, code)
        assert.matches(path .. ":4: secret: must be at least 16 bytes", err,
                       1, true)
        assert.is_nil(err:find("hunter2", 1, true))
    end)

    it("refuses to start with a low-entropy secret", function()
        local path = two_node_config("secret = (\"ab\"):rep(20),")
        local code, err = run_to_exit({ "node", path, "--name", "n1" })
        assert.is_not.equal(0, code)
        assert.matches(path .. ":4: secret: is too easy to guess", err, 1,
                       true)
    end)
end)

describe("moonshard secret", function()
    local secret

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("prints a fresh secret of 64 hex digits each time", function()
        local seen = {}
        for _ = 1, 3 do
            local code, out, err = helpers.moonshard("secret")
            assert.equal(0, code, err)
            local s = out:match("^(%x+)\n$")
            assert.is_string(s, out)
            assert.equal(64, #s)
            assert.is_nil(seen[s], "the same secret twice")
            seen[s] = true
            secret = s
        end
    end)

    it("makes a secret two nodes accept and join with", function()
        assert.is_string(secret)
        local c = helpers.cluster_up({
            size = 2,
            secret = secret,
            entities = { Counter = { module = "counter", shard_count = 8 } },
        })
        for i = 1, 8 do
            assert.equal(202, (c:node("n2"):tell("Counter", "s" .. i,
                                                 { type = "incr", by = i })))
        end
        helpers.wait_until(function()
            return c:node("n1"):call("Counter", "s8", { type = "get" }).value
                == 8
        end, 5, "the tells")
    end)
end)

describe("a node alone without a secret", function()
    local n, listen

    setup(function()
        n = helpers.start({
            cluster = "solo9",
            entities = { Counter = { module = "counter", shard_count = 4 } },
        })
        listen = n:members().members[1].address
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("runs and answers", function()
        assert.equal(202, (n:tell("Counter", "c1", { type = "incr" })))
        helpers.wait_until(function()
            return n:call("Counter", "c1", { type = "get" }).value == 1
        end, 5, "the tell")
    end)

    it("cannot be joined with the secret derived from the cluster name, "
       .. "and nothing a peer sends with it is delivered", function()
        local before = n:stats()
        -- TELL frames (kind 10) after the handshake, if it succeeded
        local rogue = helpers.spawn({ ROGUE, "solo9",
                                      "moonshard-dev-secret:solo9", listen,
                                      "10", "1", "20",
                                      '{"type":"incr","by":1337}' })
        assert.is_true(rogue:wait(10), "the rogue peer did not stop")
        assert.equal(1, rogue.code, "the rogue peer got through the "
                     .. "handshake")
        local after = n:stats()
        assert.equal(before.delivered, after.delivered)
        assert.equal(1, n:call("Counter", "c1", { type = "get" }).value)
        -- still alone
        assert.equal(1, #n:members().members)
    end)
end)

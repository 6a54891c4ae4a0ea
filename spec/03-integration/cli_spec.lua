-- `moonshard tell|ask|stop|status --node HOST:PORT` against a real node
-- (status lays the stats out for people; status --json prints them):
-- exit 0 with the body on stdout for a 2xx answer, 1 with
-- "error: STATUS BODY" on stderr for an error status, 2 when the node
-- cannot be reached or the command line is wrong.

local helpers = require "helpers.node"

local json = helpers.json

describe("the moonshard CLI", function()
    local n

    local function cli(...)
        return helpers.moonshard(...)
    end

    setup(function()
        n = helpers.start({
            entities = {
                Counter = { module = "counter" },
                Journal = { module = "journal", idle_timeout = false },
                Sleeper = { module = "sleeper" },
                Sticky = { module = "probe", idle_timeout = 60 },
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("tells an entity and exits 0", function()
        local code, out, err = cli("tell", "--node", n.address, "Counter",
                                   "cli-1", '{"type":"incr","by":3}')
        assert.equal(0, code, err)
        assert.same({ ok = true }, json.decode(out))
        n:settle()
        assert.same({ value = 3 }, n:call("Counter", "cli-1",
                                          { type = "get" }))
    end)

    it("asks an entity and prints the reply", function()
        n:tell("Counter", "cli-2", { type = "incr", by = 5 })
        local code, out, err = cli("ask", "--node", n.address, "Counter",
                                   "cli-2", '{"type":"get"}')
        assert.equal(0, code, err)
        assert.same({ value = 5 }, json.decode(out))
    end)

    it("takes --node=HOST:PORT and --timeout", function()
        local code, out, err = cli("ask", "--node=" .. n.address,
                                   "--timeout", "2", "Counter", "cli-3",
                                   '{"type":"get"}')
        assert.equal(0, code, err)
        assert.same({ value = 0 }, json.decode(out))
    end)

    it("passes ids that need percent-encoding", function()
        local id = "a b/ü?#%"
        local code, _, err = cli("tell", "--node", n.address, "Counter", id,
                                 '{"type":"incr","by":2}')
        assert.equal(0, code, err)
        assert.same({ value = 2 }, n:call("Counter", id, { type = "get" }))
    end)

    it("exits 1 with the error status when the handler raises", function()
        local code, out, err = cli("ask", "--node", n.address, "Counter",
                                   "cli-4", '{"type":"bogus"}')
        assert.equal(1, code)
        assert.equal("", out)
        local status, body = err:match("^error: (%d+) (.-)\n?$")
        assert.equal("500", status, err)
        assert.equal("handler_error", json.decode(body).error.code)
    end)

    it("exits 1 with 504 when the ask times out", function()
        local code, _, err = cli("ask", "--node", n.address, "--timeout",
                                 "0.2", "Sleeper", "cli-5",
                                 '{"type":"nap","seconds":1.5}')
        assert.equal(1, code)
        assert.matches("^error: 504 ", err)
        assert.matches("timeout", err, 1, true)
    end)

    it("exits 1 for an unknown type and for a body that is not JSON",
       function()
        local code, _, err = cli("tell", "--node", n.address, "Nope", "x",
                                 "{}")
        assert.equal(1, code)
        assert.matches("^error: 404 ", err)
        code, _, err = cli("tell", "--node", n.address, "Counter", "x", "{")
        assert.equal(1, code)
        assert.matches("^error: 400 ", err)
    end)

    it("passivates an entity with stop", function()
        n:call("Sticky", "cli-6", { type = "set", value = 1 })
        local before = n:stats()
        local code, _, err = cli("stop", "--node", n.address, "Sticky",
                                 "cli-6")
        assert.equal(0, code, err)
        helpers.wait_until(function()
            return n:stats().passivations == before.passivations + 1
        end, 5, "the passivation")
        assert.is_nil(n:call("Sticky", "cli-6", { type = "get" }).value)
    end)

    it("lays out the node, its members and counters with status",
       function()
        local code, out, err = cli("status", "--node", n.address)
        assert.equal(0, code, err)
        local lines = {}
        for l in out:gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
        assert.matches("^node n1 at 127%.0%.0%.1:%d+, cluster spec, "
                       .. "moonshard [%d.]+ %(coordinator%)$", lines[1])
        assert.equal("members: 1, converged", lines[2])
        assert.matches("^  n1  127%.0%.0%.1:%d+  up  reachable  this node, "
                       .. "coordinator$", lines[3])
        assert.matches("\nentities: %d+ active, %d+ pending; %d+ "
                       .. "delivered", out)
        assert.matches("\nmoves %(coordinator%): 0 in progress", out)
        assert.matches("\ntransport: ", out)
    end)

    it("prints the node's stats as JSON with status --json", function()
        local code, out, err = cli("status", "--json", "--node", n.address)
        assert.equal(0, code, err)
        local stats = json.decode(out)
        assert.equal("n1", stats.node)
        assert.equal("spec", stats.cluster)
        assert.is_number(stats.routed)
        assert.is_true(stats.routed >= 1)
    end)

    it("exits 2 when the node cannot be reached", function()
        local port = helpers.free_port() -- nobody listens there
        local code, _, err = cli("status", "--node", "127.0.0.1:" .. port)
        assert.equal(2, code)
        assert.matches("cannot connect", err, 1, true)
        code = cli("ask", "--node", "127.0.0.1:" .. port, "Counter", "x",
                   "{}")
        assert.equal(2, code)
    end)

    it("lists every command's options in its usage", function()
        local code, out = cli("--help")
        assert.equal(0, code)
        assert.matches("status [--node H:P] [--json]", out, 1, true)
        assert.matches("members [--node H:P] [--json]", out, 1, true)
    end)

    it("exits 2 on a usage error", function()
        assert.equal(2, (cli("tell", "--node", n.address, "Counter", "x")))
        assert.equal(2, (cli("ask", "--node", n.address, "--timeout", "0",
                             "Counter", "x", "{}")))
        assert.equal(2, (cli("status", "--node", n.address, "extra")))
        assert.equal(2, (cli("members", "--bogus", "--node", n.address)))
        assert.equal(2, (cli("tell", "--bogus", "Counter", "x", "{}")))
    end)
end)

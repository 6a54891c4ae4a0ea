-- The start banner writes the gateway's address as a URL does: an IPv6
-- gateway is http://[::1]:PORT, not http://::1:PORT (issue 9, item 7).
-- The node listens on ::1; the spec only reads its banner (no traffic).

local helpers = require "helpers.node"

-- Writes `config` (Lua source) into dir, starts `moonshard node` on it
-- (with `args`, e.g. { "--name", "n2" }), waits until its output holds
-- `until_text`, stops it by PID and returns the output.
local function banner(dir, config, args, until_text, what)
    local path = dir .. "/cluster.lua"
    helpers.write_file(path, config)
    local argv = { helpers.bin, "node", path }
    for _, a in ipairs(args or {}) do
        argv[#argv + 1] = a
    end
    local log = dir .. "/node.log"
    local proc = helpers.spawn(argv, { stdout = log, stderr = "stdout" })
    local text = helpers.wait_until(function()
        local t = helpers.read_file(log) or ""
        if proc:poll() then
            error("the node exited:\n" .. t)
        end
        return t:find(until_text, 1, true) and t
    end, 10, what)
    assert.is_true(proc:terminate(5))
    return text
end

describe("the start banner", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("brackets an IPv6 gateway address", function()
        local dir = helpers.tmpdir()
        local port = helpers.free_port()
        local text = banner(dir, ([[
return {
    cluster = "banner",
    secret = "spec-secret-7f3a9c2e41b8",
    nodes = { { name = "n1", listen = "127.0.0.1:%d", http = "[::1]:%d" } },
    entities = { Counter = { module = "counter" } },
}
]]):format(helpers.free_port(), port),
                            nil, "gateway on http", "the banner")
        assert.matches("HTTP gateway on http://[::1]:" .. port .. "\n", text,
                       1, true)
        assert.matches("--node [::1]:" .. port, text, 1, true)
    end)

    it("says https:// for a gateway with TLS, in the URL and the CLI's "
       .. "--node", function()
        local certs = require "helpers.certs"
        local dir = helpers.tmpdir()
        certs.ca(dir, "ca")
        certs.leaf(dir, "ca", "gw")
        local port = helpers.free_port()
        local text = banner(dir, ([[
return {
    cluster = "banner",
    secret = "spec-secret-7f3a9c2e41b8",
    gateway_tls = { cert = "gw.pem", key = "gw.key" },
    nodes = { { name = "n1", listen = "127.0.0.1:%d",
                http = "127.0.0.1:%d" } },
    entities = { Counter = { module = "counter" } },
}
]]):format(helpers.free_port(), port),
                            nil, "Ctrl-C", "the banner")
        assert.matches("HTTP gateway on https://127.0.0.1:" .. port .. "\n",
                       text, 1, true)
        assert.matches("ask --node https://127.0.0.1:" .. port, text, 1,
                       true)
        assert.matches("-XPOST https://127.0.0.1:" .. port, text, 1, true)
        assert.is_nil(text:find("http://", 1, true), text)
    end)

    it("is written at once by every node, not only the config's first",
       function()
        -- nodes after the first print no hints; their banner line must
        -- still reach a log file while the node runs (stdout to a file is
        -- fully buffered)
        local dir = helpers.tmpdir()
        local port = helpers.free_port()
        local text = banner(dir, ([[
return {
    cluster = "banner",
    secret = "spec-secret-7f3a9c2e41b8",
    nodes = {
        { name = "n1", listen = "127.0.0.1:%d", http = "127.0.0.1:%d" },
        { name = "n2", listen = "127.0.0.1:%d", http = "[::1]:%d" },
    },
    entities = { Counter = { module = "counter" } },
}
]]):format(helpers.free_port(), helpers.free_port(), helpers.free_port(),
           port),
                            { "--name", "n2" }, "gateway on http",
                            "the banner of n2")
        assert.matches("node n2 is up, HTTP gateway on http://[::1]:" .. port
                       .. "\n", text, 1, true)
    end)
end)

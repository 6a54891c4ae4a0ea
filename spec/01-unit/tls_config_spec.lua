-- The TLS settings and the API token of moonshard.config (issue 15, item
-- 4): `tls` (between nodes), `gateway_tls`, their per-node cert/key, the
-- paths resolved against the config file's directory, `api_token`. The
-- files themselves are checked when a node starts
-- (spec/03-integration/tls_spec.lua).

local config = require "moonshard.config"

local SECRET = "s3cret-4b7e9d01a2c6"

-- A valid 2-node config table, `top` merged into its top level and
-- `per[i]` into node i's entry.
local function cfg(top, per)
    local t = {
        cluster = "demo",
        secret = SECRET,
        nodes = {
            { name = "n1", listen = "127.0.0.1:7101",
              http = "127.0.0.1:7201" },
            { name = "n2", listen = "127.0.0.1:7102",
              http = "127.0.0.1:7202" },
        },
        entities = { Counter = { module = "counter" } },
    }
    for k, v in pairs(top or {}) do
        t[k] = v
    end
    for i, fields in pairs(per or {}) do
        for k, v in pairs(fields) do
            t.nodes[i][k] = v
        end
    end
    return t
end

local function fails(t, want)
    local res, err = config.normalize(t, "/etc/ms/cluster.lua")
    assert.is_nil(res)
    assert.matches(want, err, 1, true)
end

describe("moonshard.config: TLS and the API token", function()
    it("has no TLS and no token by default", function()
        local c = assert(config.normalize(cfg(), "/etc/ms/cluster.lua"))
        assert.is_nil(c.tls)
        assert.is_nil(c.gateway_tls)
        assert.is_nil(c.api_token)
        assert.is_nil(c.nodes[1].tls)
    end)

    it("takes a CA at the top and each node's cert and key, resolved "
       .. "against the config file's directory", function()
        local c = assert(config.normalize(cfg({ tls = { ca = "ca.pem" } }, {
            { tls = { cert = "n1.pem", key = "keys/n1.key" } },
            { tls = { cert = "/abs/n2.pem", key = "n2.key" } },
        }), "/etc/ms/cluster.lua"))
        assert.equal("/etc/ms/ca.pem", c.tls.ca)
        assert.same({ cert = "/etc/ms/n1.pem", key = "/etc/ms/keys/n1.key" },
                    c.nodes[1].tls)
        assert.same({ cert = "/abs/n2.pem", key = "/etc/ms/n2.key" },
                    c.nodes[2].tls)
    end)

    it("gives every node the top-level cert and key unless its entry has "
       .. "its own", function()
        local c = assert(config.normalize(cfg(
            { tls = { ca = "ca.pem", cert = "all.pem", key = "all.key" } },
            { nil, { tls = { key = "n2.key" } } }), "cluster.lua"))
        -- a file name without a directory: relative to the working one
        assert.same({ cert = "all.pem", key = "all.key" }, c.nodes[1].tls)
        assert.same({ cert = "all.pem", key = "n2.key" }, c.nodes[2].tls)
    end)

    it("refuses TLS without a CA", function()
        fails(cfg({ tls = { cert = "a.pem", key = "a.key" } }),
              "tls.ca: required")
    end)

    it("refuses TLS when a node has no certificate", function()
        fails(cfg({ tls = { ca = "ca.pem" } },
                  { { tls = { cert = "n1.pem", key = "n1.key" } } }),
              "nodes[2].tls: required: 'tls' is on, and node n2 has no "
              .. "cert (set tls.cert at the top or in its entry)")
    end)

    it("refuses a node's key missing when its cert is given", function()
        fails(cfg({ tls = { ca = "ca.pem" } },
                  { { tls = { cert = "n1.pem", key = "n1.key" } },
                    { tls = { cert = "n2.pem" } } }),
              "nodes[2].tls.key: required: 'tls' is on, and node n2 has "
              .. "no key")
    end)

    it("refuses TLS on some nodes but not the cluster", function()
        fails(cfg(nil, { nil, { tls = { cert = "n2.pem", key = "n2.key" } } }),
              "nodes[2].tls: needs the top-level 'tls' (its ca): all nodes "
              .. "of a cluster use TLS or none")
    end)

    -- the node keeps each path in 512 bytes (runtime/core/config.h): a
    -- relative path the directory makes longer must fail here, not be
    -- cut (the node would read another path)
    it("refuses a path that the config file's directory makes too long",
       function()
        local dir = "/" .. ("d"):rep(300)
        local name = ("c"):rep(250) .. ".pem"
        local t = cfg({ tls = { ca = "ca.pem" } }, {
            { tls = { cert = name, key = "n1.key" } },
            { tls = { cert = "n2.pem", key = "n2.key" } },
        })
        local res, err = config.normalize(t, dir .. "/cluster.lua")
        assert.is_nil(res)
        assert.matches("nodes[1].tls.cert: is 556 bytes once joined to the "
                       .. "config file's directory; at most 511", err, 1,
                       true)
        -- as long as fits
        t.nodes[1].tls.cert = ("c"):rep(511 - 302 - 4) .. ".pem"
        res = assert(config.normalize(t, dir .. "/cluster.lua"))
        assert.equal(511, #res.nodes[1].tls.cert)
    end)

    it("refuses unknown and mistyped TLS fields", function()
        fails(cfg({ tls = { ca = "ca.pem", cert = "c", key = "k",
                            verify = false } }),
              "tls.verify: unknown field")
        fails(cfg({ tls = "on" }), "tls: must be a table")
        fails(cfg({ tls = { ca = 7, cert = "c", key = "k" } }),
              "tls.ca: must be a non-empty string")
        fails(cfg({ tls = { ca = "ca.pem", cert = "c", key = "k" } },
                  { { tls = { ca = "mine.pem" } } }),
              "nodes[1].tls.ca: unknown field")
    end)

    it("takes a gateway certificate with an optional client CA", function()
        local c = assert(config.normalize(cfg(
            { gateway_tls = { cert = "gw.pem", key = "gw.key" } }),
            "/srv/c.lua"))
        assert.is_nil(c.gateway_tls.ca)
        assert.same({ cert = "/srv/gw.pem", key = "/srv/gw.key" },
                    c.nodes[2].gateway_tls)
        c = assert(config.normalize(cfg(
            { gateway_tls = { ca = "clients.pem" } },
            { { gateway_tls = { cert = "g1.pem", key = "g1.key" } },
              { gateway_tls = { cert = "g2.pem", key = "g2.key" } } }),
            "/srv/c.lua"))
        assert.equal("/srv/clients.pem", c.gateway_tls.ca)
        assert.equal("/srv/g2.pem", c.nodes[2].gateway_tls.cert)
        fails(cfg({ gateway_tls = { ca = "clients.pem" } }),
              "required: 'gateway_tls' is on, and node n1 has no cert")
    end)

    it("takes an API token and never shows a bad one", function()
        local c = assert(config.normalize(cfg({ api_token = "tok-123" })))
        assert.equal("tok-123", c.api_token)
        local res, err = config.normalize(cfg({ api_token = "has space-9f3" }))
        assert.is_nil(res)
        assert.matches("api_token: must be printable ASCII without spaces",
                       err, 1, true)
        assert.is_nil(err:find("9f3", 1, true))
        res, err = config.normalize(cfg({ api_token = 123456 }))
        assert.is_nil(res)
        assert.matches("api_token: must be a non-empty string (got a "
                       .. "number)", err, 1, true)
        fails(cfg({ api_token = ("t"):rep(128) }),
              "api_token: must be at most 127 bytes")
    end)
end)

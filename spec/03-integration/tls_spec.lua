-- TLS between nodes and the API token of the entity endpoints (issue 15,
-- item 4; runtime/io/tls.h, runtime/io/transport.c). Real processes on
-- 127.0.0.1, certificates made by the `openssl` command line
-- (helpers.certs), captures by tcpdump on the loopback (both in
-- .ci/deps), every process stopped by its PID.

local helpers = require "helpers.node"
local certs = require "helpers.certs"
local sh = require "helpers.sh"

local format = string.format

local CLUSTER = "tlsspeczebra"
local API = "spec-api-token-7Qx"
local ENTITIES = { Counter = { module = "counter" },
                   Seq = { module = "seq", shard_count = 16 } }

-- The certificates of a cluster in `dir`: the CA "ca" signs n1..n3, the
-- CA "other" signs "bad".
local function make_certs(dir)
    certs.ca(dir, "ca")
    certs.ca(dir, "other")
    for _, n in ipairs({ "n1", "n2", "n3" }) do
        certs.leaf(dir, "ca", n)
    end
    certs.leaf(dir, "other", "bad")
end

-- The options of a `size`-node cluster, with TLS between its nodes when
-- `tls` (each node its own certificate, the CA at the top).
local function cluster_opts(size, tls, settings)
    local opts = { size = size, cluster = CLUSTER, entities = ENTITIES,
                   settings = settings or {}, node_fields = {} }
    if tls then
        opts.settings.tls = { ca = "ca.pem" }
        for i = 1, size do
            local n = "n" .. i
            opts.node_fields[n] = { tls = { cert = n .. ".pem",
                                            key = n .. ".key" } }
        end
    end
    return opts
end

-- A cluster for `opts` with its certificates, started and converged.
local function start_cluster(opts)
    local c = helpers.cluster(opts)
    make_certs(c.dir)
    c:start()
    c:wait_converged(nil, 15)
    return c
end

local function entity(id, action)
    return "/v1/entities/Counter/" .. id .. "/" .. action
end

-- The name of the owner of Counter `id` as node `n` sees it (with the
-- API token, which a cluster without one ignores).
local function owner(n, id)
    local s, body, raw = n:http("GET", entity(id, "owner"), nil,
                                { headers = { ["X-Moonshard-Api-Token"] =
                                              API } })
    assert(s == 200, raw)
    return body.owner
end

-- The packets of a classic pcap file (24-byte header, then records with
-- a 16-byte header whose bytes 9..12 are the captured length, little
-- endian) and the bytes of their frames.
local function pcap_packets(data)
    assert(#data >= 24, "not a pcap file")
    local n, off, bytes = 0, 25, 0
    while off + 16 <= #data + 1 do
        local b1, b2, b3, b4 = data:byte(off + 8, off + 11)
        local len = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
        off = off + 16 + len
        n = n + 1
        bytes = bytes + len
    end
    return n, bytes
end

-- Starts tcpdump on the loopback for the listen ports of `c`'s nodes,
-- writing to `file`; returns its process once it listens.
local function start_capture(c, file)
    local argv = { "tcpdump", "-i", "lo", "-U", "--immediate-mode", "-n",
                   "-Z", "root", "-w",
                   file }
    for i, n in ipairs(c.nodes) do
        if i > 1 then
            argv[#argv + 1] = "or"
        end
        argv[#argv + 1] = "port"
        argv[#argv + 1] = tostring(n.listen_port)
    end
    local log = file .. ".log"
    local p = helpers.spawn(argv, { stdout = log, stderr = "stdout" })
    helpers.wait_until(function()
        if p:poll() then
            error("tcpdump exited: " .. (helpers.read_file(log) or ""))
        end
        return (helpers.read_file(log) or ""):find("listening on", 1, true)
    end, 10, "tcpdump to listen")
    return p
end

-- Runs a 2-node cluster (TLS between the nodes when `tls`) under a
-- capture, sends 40 tells carrying `payload` through n1 (those owned by
-- n2 cross the link) and asks each counter through n2. Returns the
-- capture's bytes, its packet count, how many tells crossed, and n2's
-- member address (the handshake and the gossip carry it).
local function captured_run(tls, payload)
    local opts = cluster_opts(2, tls)
    local c = helpers.cluster(opts)
    make_certs(c.dir)
    local file = c.dir .. "/capture.pcap"
    local cap = start_capture(c, file)
    c:start()
    c:wait_converged(nil, 15)
    local n1, n2 = c:node("n1"), c:node("n2")
    -- tells cross the link only once n1 places shards on n2
    n1:wait_placed_on("Counter", "n2")
    for i = 1, 40 do
        local status = n1:http("POST", entity("c" .. i, "tell"),
                               { type = "incr", by = 1, note = payload })
        assert.equal(202, status)
    end
    local crossed = 0
    for i = 1, 40 do
        local id = "c" .. i
        local reply = helpers.wait_until(function()
            local s, body = n2:http("POST", entity(id, "ask"),
                                    { type = "get" })
            return s == 200 and body.value == 1 and body
        end, 10, "counter " .. id .. " to count its tell")
        assert.equal(1, reply.value)
        if owner(n1, id) == "n2" then
            crossed = crossed + 1
        end
    end
    local s1, s2 = n1:stats(), n2:stats()
    assert.equal(0, s1.link_drops + s2.link_drops)
    cap:terminate(5)
    local data = assert(helpers.read_file(file))
    helpers.stop_all_checked() -- removes c.dir
    local packets = pcap_packets(data)
    return data, packets, crossed, n2.listen
end

describe("TLS between nodes", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("encrypts the links: a capture on the loopback holds neither the "
       .. "tells' payload nor a member address (nor the cluster's name or "
       .. "secret); without TLS it holds the payload and the address",
       function()
        local payload = "PLAINTEXT-MARKER-kx93vq"
        local data, packets, crossed, addr = captured_run(true, payload)
        -- tells did cross the link, and were captured (encrypted)
        assert.is_true(crossed >= 5, "only " .. crossed .. " tells crossed")
        assert.is_true(packets >= 40, "only " .. packets .. " packets")
        assert.is_nil(data:find(payload, 1, true))
        assert.is_nil(data:find(addr, 1, true))
        assert.is_nil(data:find(CLUSTER, 1, true))
        assert.is_nil(data:find(helpers.SECRET, 1, true))
        -- the control: the same run without TLS shows the payload and
        -- the member address on the wire (the cluster's name is not sent
        -- as such, and the HMAC handshake never sends the secret)
        local plain, ppackets, pcrossed, paddr = captured_run(false,
                                                              payload)
        assert.is_true(pcrossed >= 5)
        assert.is_true(ppackets >= 40)
        assert.is_not_nil(plain:find(payload, 1, true))
        assert.is_not_nil(plain:find(paddr, 1, true))
        assert.is_nil(plain:find(helpers.SECRET, 1, true))
    end)

    describe("a 3-node TLS cluster with an API token", function()
        local c

        setup(function()
            c = start_cluster(cluster_opts(3, true, { api_token = API }))
            -- the tests want ids on every node: shards go to n2 and n3
            -- only once the coordinator has their registrations, which
            -- may come after the converged view
            local hdr = { ["X-Moonshard-Api-Token"] = API }
            for _, t in ipairs({ "Counter", "Seq" }) do
                for _, name in ipairs({ "n2", "n3" }) do
                    c:node("n1"):wait_placed_on(t, name, nil, nil, hdr)
                end
            end
        end)

        teardown(function()
            helpers.stop_all_checked()
        end)

        it("routes tells and asks between its nodes", function()
            local n1, n3 = c:node("n1"), c:node("n3")
            local hdr = { headers = { ["X-Moonshard-Api-Token"] = API } }
            local owners = {}
            for i = 1, 30 do
                local id = "r" .. i
                assert.equal(202, (n1:http("POST", entity(id, "tell"),
                                           { type = "incr", by = i }, hdr)))
            end
            for i = 1, 30 do
                local id = "r" .. i
                local body = helpers.wait_until(function()
                    local s, b = n3:http("POST", entity(id, "ask"),
                                         { type = "get" }, hdr)
                    return s == 200 and b.value == i and b
                end, 10, "counter " .. id)
                assert.equal(i, body.value)
                owners[owner(n1, id)] = true
            end
            -- every node owns some: asks and tells crossed every link
            assert.is_true(owners.n1 and owners.n2 and owners.n3)
            local drops = 0
            for _, n in ipairs(c.nodes) do
                local s = n:stats()
                drops = drops + s.link_drops + s.forward_drops
                        + s.route_expired
            end
            assert.equal(0, drops)
        end)

        -- G2 and G3 over TLS: a sender's tells to entities on the other
        -- nodes, some larger than a TLS record (16 KiB, so one tell spans
        -- records and a record holds the ends of others), arrive all and
        -- in send order
        it("keeps each sender's order across records: tells larger and "
           .. "smaller than a record arrive all, in order", function()
            local n1 = c:node("n1")
            local hdr = { headers = { ["X-Moonshard-Api-Token"] = API } }
            local IDS, ROUNDS = 12, 25
            local pad = { "", string.rep("p", 20000), string.rep("q", 700) }
            for r = 1, ROUNDS do
                for i = 1, IDS do
                    local s = n1:http("POST", "/v1/entities/Seq/o" .. i
                                      .. "/tell", { type = "seq",
                                      sender = "s1", g = (r - 1) * IDS + i,
                                      n = r, pad = pad[(r + i) % 3 + 1] },
                                      hdr)
                    assert.equal(202, s)
                end
            end
            local remote = 0
            for i = 1, IDS do
                local id = "o" .. i
                local rep = helpers.wait_until(function()
                    local s, b = n1:http("POST", "/v1/entities/Seq/" .. id
                                         .. "/ask", { type = "report" }, hdr)
                    return s == 200 and b.count == ROUNDS and b
                end, 15, "Seq " .. id .. " to see its " .. ROUNDS .. " tells")
                assert.equal(0, rep.gaps)
                assert.equal(0, rep.reorders)
                local _, o = n1:http("GET", "/v1/entities/Seq/" .. id
                                     .. "/owner", nil, hdr)
                if o.owner ~= "n1" then remote = remote + 1 end
            end
            assert.is_true(remote >= 3, remote .. " of " .. IDS
                           .. " entities on other nodes")
        end)

        it("refuses a node whose certificate another CA signed: it never "
           .. "becomes a member, and the refusal is counted and logged",
           function()
            local n1 = c:node("n1")
            local before = n1:stats().handshake_failures
            local n4 = c:new_node("n4")
            c.opts.node_fields.n4 = { tls = { cert = "bad.pem",
                                              key = "bad.key" } }
            n4.config = c:write_config("n4.lua", { tls = { ca = "other.pem" } },
                                       { n4 })
            n4:launch()
            n4:wait_healthy()
            helpers.wait_until(function()
                return n1:stats().handshake_failures > before
            end, 10, "n1 to count a failed handshake")
            helpers.sleep(2)
            for _, m in ipairs(n1:members().members) do
                assert.is_not.equal("n4", m.name)
            end
            assert.matches("unauthenticated connection closed: TLS: ",
                           n1:log(), 1, true)
            assert.matches("handshake with a dialed node failed: TLS: ",
                           n4:log(), 1, true)
            n4:stop()
        end)

        it("refuses a node without TLS (its handshake is no TLS)",
           function()
            local n1 = c:node("n1")
            local before = n1:stats().handshake_failures
            local n5 = c:new_node("n5")
            local settings, fields = c.opts.settings, c.opts.node_fields
            c.opts.settings = { api_token = API }
            c.opts.node_fields = {}
            n5.config = c:write_config("n5.lua", nil, { n5 })
            c.opts.settings, c.opts.node_fields = settings, fields
            n5:launch()
            n5:wait_healthy()
            helpers.wait_until(function()
                return n1:stats().handshake_failures > before
            end, 10, "n1 to count a failed handshake")
            helpers.sleep(2)
            for _, m in ipairs(n1:members().members) do
                assert.is_not.equal("n5", m.name)
            end
            n5:stop()
        end)

        it("answers the entity endpoints only with the API token; the "
           .. "others as before", function()
            local n2 = c:node("n2")
            local path = entity("t1", "ask")
            local s, body = n2:http("POST", path, { type = "get" })
            assert.equal(401, s)
            assert.equal("unauthorized", body.error.code)
            assert.matches("X-Moonshard-Api-Token", body.error.message, 1,
                           true)
            s, body = n2:http("POST", path, { type = "get" },
                              { headers = { ["X-Moonshard-Api-Token"] =
                                            "wrong" } })
            assert.equal(401, s)
            assert.matches("wrong API token", body.error.message, 1, true)
            s = n2:http("POST", path, { type = "get" },
                        { headers = { ["X-Moonshard-Api-Token"] = API } })
            assert.equal(200, s)
            s = n2:http("POST", path, { type = "get" },
                        { headers = { Authorization = "Bearer " .. API } })
            assert.equal(200, s)
            s = n2:http("POST", path, { type = "get" },
                        { headers = { Authorization = "Bearer x" .. API } })
            assert.equal(401, s)
            -- read-only endpoints and the admin ones are unchanged
            assert.equal(200, (n2:http("GET", "/v1/stats")))
            assert.equal(200, (n2:http("GET", "/v1/members")))
            assert.equal(403, (n2:admin("down", "127.0.0.1:1", "wrong")))
            -- the CLI sends $MOONSHARD_API_TOKEN
            local cmd = format("%s ask --node 127.0.0.1:%d Counter t1 "
                               .. "'{\"type\":\"get\"}'", helpers.bin,
                               n2.port)
            local out, rc = sh(cmd)
            assert.equal(1, rc, out)
            assert.matches("401", out, 1, true)
            out, rc = sh("MOONSHARD_API_TOKEN=" .. API .. " " .. cmd)
            assert.equal(0, rc, out)
            assert.matches("\"value\":0", out, 1, true)
        end)
    end)
end)

describe("the gateway with TLS", function()
    local c, n1, base, dir

    setup(function()
        local opts = cluster_opts(1, false, {
            gateway_tls = { cert = "n1.pem", key = "n1.key" },
            api_token = API,
        })
        c = helpers.cluster(opts)
        make_certs(c.dir)
        dir = c.dir
        n1 = c:node("n1")
        n1:launch()
        base = "https://127.0.0.1:" .. n1.port
        helpers.wait_until(function()
            local _, rc = sh(format("curl -sf --cacert %s/ca.pem %s/v1/health",
                                    dir, base))
            return rc == 0
        end, 10, "the TLS gateway to answer")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- curl's status code for `args`, and its output.
    local function curl(args)
        local out = sh(format("curl -s -o %s/body -w '%%{http_code}' "
                              .. "--cacert %s/ca.pem %s", dir, dir, args))
        return out, helpers.read_file(dir .. "/body") or ""
    end

    it("answers HTTPS verified against its CA, and the entity endpoints "
       .. "only with the API token", function()
        assert.equal("200", (curl(base .. "/v1/members")))
        local code, body = curl("-X POST -d '{\"type\":\"get\"}' " .. base
                                .. entity("g1", "ask"))
        assert.equal("401", code)
        assert.matches("unauthorized", body, 1, true)
        code, body = curl("-X POST -H 'X-Moonshard-Api-Token: " .. API
                          .. "' -d '{\"type\":\"get\"}' " .. base
                          .. entity("g1", "ask"))
        assert.equal("200", code)
        assert.equal('{"value":0}', body)
        -- a body larger than one TLS record (and curl's Expect:
        -- 100-continue)
        local big = string.rep("x", 100000)
        helpers.write_file(dir .. "/big.json",
                           '{"type":"incr","pad":"' .. big .. '"}')
        for _ = 1, 10 do
            code = curl("-X POST -H 'X-Moonshard-Api-Token: " .. API .. "' "
                        .. "-H 'Content-Type: application/json' "
                        .. "--data-binary @" .. dir .. "/big.json " .. base
                        .. entity("g1", "tell"))
            assert.equal("202", code)
        end
        helpers.wait_until(function()
            code, body = curl("-X POST -H 'Authorization: Bearer " .. API
                              .. "' -d '{\"type\":\"get\"}' " .. base
                              .. entity("g1", "ask"))
            return code == "200" and body == '{"value":10}'
        end, 10, "the big tells to count")
    end)

    it("takes the API token from X-Moonshard-Api-Token beside a proxy's "
       .. "own Authorization header", function()
        local ask = " -d '{\"type\":\"get\"}' " .. base .. entity("g9", "ask")
        -- either order of the two headers
        assert.equal("200", (curl("-X POST -H 'Authorization: Basic "
                                  .. "cHJveHk6cHc=' -H 'X-Moonshard-Api-"
                                  .. "Token: " .. API .. "'" .. ask)))
        assert.equal("200", (curl("-X POST -H 'X-Moonshard-Api-Token: "
                                  .. API .. "' -H 'Authorization: Basic "
                                  .. "cHJveHk6cHc='" .. ask)))
        -- a proxy's header alone is no token
        assert.equal("401", (curl("-X POST -H 'Authorization: Basic "
                                  .. "cHJveHk6cHc='" .. ask)))
        -- each header once
        assert.equal("400", (curl("-X POST -H 'X-Moonshard-Api-Token: "
                                  .. API .. "' -H 'X-Moonshard-Api-Token: "
                                  .. API .. "'" .. ask)))
    end)

    it("answers pipelined requests in order", function()
        local reqs = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
            .. "POST " .. entity("p1", "ask") .. " HTTP/1.1\r\nHost: x\r\n"
            .. "X-Moonshard-Api-Token: " .. API .. "\r\n"
            .. "Content-Length: 14\r\n\r\n{\"type\":\"get\"}"
            .. "GET /v1/health HTTP/1.1\r\nHost: x\r\n"
            .. "Connection: close\r\n\r\n"
        helpers.write_file(dir .. "/pipeline.txt", reqs)
        local out = sh(format("(cat %s/pipeline.txt; sleep 2) | timeout 10 "
                              .. "openssl s_client -quiet -CAfile %s/ca.pem "
                              .. "-connect 127.0.0.1:%d 2>/dev/null", dir,
                              dir, n1.port))
        local _, statuses = out:gsub("HTTP/1.1 200 OK", "")
        assert.equal(3, statuses, out)
        local a = out:find('"ok":true', 1, true)
        local b = out:find('{"value":0}', 1, true)
        assert.is_true(a ~= nil and b ~= nil and a < b, out)
        assert.is_not_nil(out:find('"ok":true', b, true), out)
    end)

    it("lists https:// examples on its index page, with the CA and the "
       .. "API token its entity endpoints want", function()
        local code, body = curl(base .. "/")
        assert.equal("200", code)
        -- every URL it shows is https:// (a plain http:// one gets no
        -- answer from this port)
        assert.is_nil(body:find("http://", 1, true), body)
        assert.matches("https://127.0.0.1:" .. n1.port .. "/ui\n", body, 1,
                       true)
        assert.matches("curl --cacert \"$MOONSHARD_CA\" -H "
                       .. "\"X-Moonshard-Api-Token: $MOONSHARD_API_TOKEN\" "
                       .. "-X POST", body, 1, true)
        assert.matches("curl --cacert \"$MOONSHARD_CA\" https://127.0.0.1:"
                       .. n1.port .. "/v1/members\n", body, 1, true)
        assert.matches("--node https://127.0.0.1:" .. n1.port, body, 1, true)
        -- the ask it shows answers, with the CA and the token it names
        local ask = body:match("  (curl [^\n]*/ask%?timeout=5')\n")
        assert.is_not_nil(ask, body)
        local out = sh(format("export MOONSHARD_CA=%s/ca.pem MOONSHARD_API_TOKEN=%s; "
                              .. "%s -s -w ' %%{http_code}'", dir, API, ask))
        assert.matches(" 200$", out)
    end)

    it("streams membership events over TLS (GET /v1/events)", function()
        -- curl reads the stream for 2 s: the snapshot must arrive sealed
        -- like every response (a plaintext write would break the TLS
        -- session and curl would report an error, not the event)
        local out, rc = sh(format("curl -sN -m 2 --cacert %s/ca.pem "
                                  .. "%s/v1/events", dir, base))
        assert.equal(28, rc, out) -- ended by -m, not by a TLS error
        assert.matches("event: snapshot\n", out, 1, true)
        assert.matches('"name":"n1"', out, 1, true)
        assert.is_true(n1:alive())
    end)

    it("refuses plain HTTP on its port, and a client that trusts "
       .. "another CA refuses it", function()
        local function failures()
            local _, body = curl(base .. "/v1/stats")
            return helpers.json.decode(body).http_tls_failures
        end
        local before = failures()
        local _, rc = sh(format("curl -s -m 3 http://127.0.0.1:%d/v1/health",
                                n1.port))
        assert.is_not.equal(0, rc)
        -- counted, and logged (at powers of two)
        assert.equal(before + 1, failures())
        assert.matches("HTTPS handshake failed", n1:log(), 1, true)
        local out
        out, rc = sh(format("curl -s -m 3 --cacert %s/other.pem "
                            .. "%s/v1/health", dir, base))
        assert.equal(60, rc, out) -- the peer's certificate did not verify
        assert.is_true(n1:alive())
    end)

    it("is spoken to by the CLI at https://, with $MOONSHARD_CA and "
       .. "$MOONSHARD_API_TOKEN", function()
        local env = format("MOONSHARD_CA=%s/ca.pem MOONSHARD_API_TOKEN=%s ",
                           dir, API)
        local out, rc = sh(env .. helpers.bin .. " ask --node " .. base
                           .. " Counter g2 '{\"type\":\"get\"}'")
        assert.equal(0, rc, out)
        assert.equal('{"value":0}\n', out)
        out, rc = sh(env .. helpers.bin .. " status --json --node " .. base)
        assert.equal(0, rc, out)
        out, rc = sh(format("MOONSHARD_CA=%s/other.pem %s status --node %s",
                            dir, helpers.bin, base))
        assert.equal(2, rc, out)
        assert.matches("TLS with 127.0.0.1:" .. n1.port .. " failed: "
                       .. "unable to get local issuer certificate", out, 1,
                       true)
    end)
end)

-- A one-node cluster whose gateway has TLS and the clients' CA `ca` (a
-- file made by make_certs), started; returns the cluster, its node and
-- curl(args): the HTTP status of GET /v1/health with `args` (a client
-- certificate), verifying the gateway against ca.pem, and curl's code.
local function client_ca_gateway(ca)
    local c = helpers.cluster(cluster_opts(1, false, {
        gateway_tls = { cert = "n1.pem", key = "n1.key", ca = ca },
    }))
    make_certs(c.dir)
    local n1 = c:node("n1")
    n1:launch()
    local url = format("https://127.0.0.1:%d/v1/health", n1.port)
    local function curl(args)
        return sh(format("curl -s -m 5 -o /dev/null -w '%%{http_code}' "
                         .. "--cacert %s/ca.pem %s %s", c.dir, args, url))
    end
    return c, n1, curl
end

describe("the gateway with TLS and a client CA", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("answers only clients whose certificate that CA signed", function()
        local c, n1, curl = client_ca_gateway("ca.pem")
        helpers.wait_until(function()
            return curl(format("--cert %s/n2.pem --key %s/n2.key", c.dir,
                               c.dir)) == "200"
        end, 10, "the gateway to answer a client with a certificate")
        local out, rc = curl("")
        assert.is_not.equal(0, rc, out)
        assert.is_not.equal("200", out)
        out, rc = curl(format("--cert %s/bad.pem --key %s/bad.key", c.dir,
                              c.dir))
        assert.is_not.equal(0, rc, out)
        assert.is_not.equal("200", out)
        assert.equal("200", (curl(format("--cert %s/n3.pem --key %s/n3.key",
                                         c.dir, c.dir))))
        -- the CLI presents $MOONSHARD_CERT and $MOONSHARD_KEY
        local cli = format("MOONSHARD_CA=%s/ca.pem %%s %s members --json "
                           .. "--node https://127.0.0.1:%d", c.dir,
                           helpers.bin, n1.port)
        out, rc = sh(format(cli, format("MOONSHARD_CERT=%s/n2.pem "
                                        .. "MOONSHARD_KEY=%s/n2.key", c.dir,
                                        c.dir)))
        assert.equal(0, rc, out)
        assert.matches('"name":"n1"', out, 1, true)
        out, rc = sh(format(cli, ""))
        assert.equal(2, rc, out)
        out, rc = sh(format(cli, format("MOONSHARD_CERT=%s/n2.pem "
                                        .. "MOONSHARD_KEY=%s/n3.key", c.dir,
                                        c.dir)))
        assert.equal(2, rc, out)
        assert.matches("cannot use the client certificate", out, 1, true)
        assert.is_true(n1:alive())
    end)

    -- the clients' CA is theirs: the gateway's own certificate may come
    -- from another CA (a company's, a public one), and must not be
    -- checked against the clients' CA at start
    it("starts when another CA than the clients' signed its certificate",
       function()
        local c, n1, curl = client_ca_gateway("other.pem")
        helpers.wait_until(function()
            return curl(format("--cert %s/bad.pem --key %s/bad.key", c.dir,
                               c.dir)) == "200"
        end, 10, "the gateway to answer a client the clients' CA signed")
        local out, rc = curl(format("--cert %s/n2.pem --key %s/n2.key",
                                    c.dir, c.dir))
        assert.is_not.equal(0, rc, out)
        assert.is_not.equal("200", out)
        assert.is_true(n1:alive())
    end)
end)

describe("TLS settings", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    -- Runs `moonshard node` for n1 of a 2-node TLS cluster whose n1 has
    -- the TLS fields `n1tls` and the top-level `tls`; it must exit.
    -- Returns its exit code and output.
    local function start_fails(top, n1tls, prep)
        local opts = cluster_opts(2, true)
        opts.settings.tls = top
        opts.node_fields.n1.tls = n1tls
        local c = helpers.cluster(opts)
        make_certs(c.dir)
        if prep then
            prep(c.dir)
        end
        local p = helpers.spawn({ helpers.bin, "node", c.config, "--name",
                                  "n1" }, { stdout = c.dir .. "/out",
                                            stderr = "stdout" })
        local exited = p:wait(10)
        if not exited then
            p:terminate(1)
        end
        assert.is_true(exited, "the node kept running")
        return p.code, helpers.read_file(c.dir .. "/out") or "", c.dir
    end

    it("refuses to start with a missing certificate, naming it", function()
        local code, out, dir = start_fails({ ca = "ca.pem" },
            { cert = "nope.pem", key = "n1.key" })
        assert.is_not.equal(0, code)
        assert.matches("tls: certificate " .. dir .. "/nope.pem: No such "
                       .. "file", out, 1, true)
    end)

    it("refuses to start with a key that does not match", function()
        local code, out = start_fails({ ca = "ca.pem" },
            { cert = "n1.pem", key = "n2.key" })
        assert.is_not.equal(0, code)
        assert.matches("n2.key does not match certificate", out, 1, true)
    end)

    it("refuses to start with an unreadable key", function()
        local code, out = start_fails({ ca = "ca.pem" },
            { cert = "n1.pem", key = "junk.key" }, function(dir)
                helpers.write_file(dir .. "/junk.key", "not a key\n")
            end)
        assert.is_not.equal(0, code)
        assert.matches("tls: private key .*junk.key: ", out)
    end)

    it("refuses to start when another CA signed its certificate",
       function()
        local code, out = start_fails({ ca = "ca.pem" },
            { cert = "bad.pem", key = "bad.key" })
        assert.is_not.equal(0, code)
        assert.matches("bad.pem does not verify against the CA", out, 1,
                       true)
    end)

    it("refuses to start with a missing CA file", function()
        local code, out = start_fails({ ca = "missing-ca.pem" },
            { cert = "n1.pem", key = "n1.key" })
        assert.is_not.equal(0, code)
        assert.matches("CA certificate .*missing%-ca.pem: No such file",
                       out)
    end)
end)

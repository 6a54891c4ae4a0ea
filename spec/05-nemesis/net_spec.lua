-- The nemesis network (nemesis/net.lua): real namespaces, veth pairs, a
-- bridge and nftables rules, with real nodes in them. Needs root, `ip` and
-- `nft` (CI runs as root): a missing one fails the spec, it never skips.
package.path = "./?.lua;" .. package.path

local helpers = require "helpers.node"
local net = require "nemesis.net"
local pg = require "helpers.pg"

local sh = net.sh

-- true when a TCP connection from node `from`'s namespace to addr:port
-- opens within 2 s
local function connects(n, from, addr, port)
    local _, ok = sh(string.format("ip netns exec %s timeout 2 bash -c "
        .. "'exec 3<>/dev/tcp/%s/%d'", n.names.ns[from], addr, port))
    return ok
end

-- the names of run `id` that exist now
local function left_of(id)
    local found, list = net.existing(), {}
    for _, e in ipairs(found.ns) do
        if e.id == id then list[#list + 1] = e.name end
    end
    for _, e in ipairs(found.links) do
        if e.id == id then list[#list + 1] = e.name end
    end
    return list
end

-- The namespaces alone of left_of(id).
local function namespaces_of(id)
    local list = {}
    for _, e in ipairs(net.existing().ns) do
        if e.id == id then list[#list + 1] = e.name end
    end
    return list
end

local function reachable(viewer, name)
    local m = helpers.member(viewer:members(), name)
    return m and m.reachable ~= false
end

describe("nemesis network", function()
    local n, c

    setup(function()
        assert(net.missing() == nil, net.missing())
        n = net.new(3)
        n:setup(helpers.home)
        c = helpers.cluster({
            size = 3, hosts = n.hosts, prefixes = n.prefixes,
            secret = "spec-secret-3c81f0a97d25e4b6",
            entities = { Counter = { module = "counter" } },
        })
        c:start(nil, 20)
        c:wait_converged(nil, 20)
    end)

    teardown(function()
        pg.stop_all()
        helpers.stop_all_checked()
        if n then n:teardown() end
    end)

    it("runs each node in its own namespace, on its address, under the "
       .. "PID the helper signals", function()
        local own = sh("readlink /proc/self/ns/net")
        for i, node in ipairs(c.nodes) do
            assert.equal(n.hosts[i], node.host)
            assert.equal(10 + i, tonumber(node.listen:match("%.(%d+):")))
            local pids = sh("ip netns pids " .. n.names.ns[i])
            assert.truthy((" " .. pids:gsub("\n", " ")):find(
                " " .. node.pid .. " ", 1, true), pids)
            assert.not_equal(own, sh("readlink /proc/" .. node.pid
                                     .. "/ns/net"))
            assert.truthy(helpers.read_file("/proc/" .. node.pid
                .. "/cmdline"):find("moonshard", 1, true))
        end
        local node = c.nodes[2]
        local function state()
            return helpers.read_file("/proc/" .. node.pid .. "/stat")
                :match("^%d+ %b() (%a)")
        end
        node:signal(helpers.SIGSTOP)
        helpers.wait_until(function() return state() == "T" end, 5,
                           "the node stopped")
        node:signal(helpers.SIGCONT)
        helpers.wait_until(function() return state() ~= "T" end, 5,
                           "the node running again")
        -- 127.0.0.1 in a namespace is the namespace's own loopback
        assert.truthy(connects(n, 2, "127.0.0.1", 1) == false)
    end)

    it("isolate cuts a node from the others both ways while the gateway "
       .. "still reaches it; heal restores it", function()
        local n1, n3 = c.nodes[1], c.nodes[3]
        assert.is_true(connects(n, 1, n.hosts[3], n3.port))
        n:cut(net.rules("isolate", { node = 3 }, n.hosts, n.gateway, 1))
        assert.truthy(n:ruleset(3):find("drop", 1, true))
        assert.is_false(connects(n, 1, n.hosts[3], n3.port))
        assert.is_false(connects(n, 3, n.hosts[2], c.nodes[2].port))
        assert.is_true(connects(n, 1, n.hosts[2], c.nodes[2].port))
        -- the clients' side (the root namespace, from the bridge) is open
        assert.equal(200, (n3:http("GET", "/v1/health", nil,
                                   { max_time = 2 })))
        helpers.wait_until(function()
            return not reachable(n1, "n3")
        end, 15, "n1 to see n3 unreachable")
        n:heal()
        assert.falsy(n:ruleset(3):find("drop", 1, true))
        assert.is_true(connects(n, 1, n.hosts[3], n3.port))
        c:wait_converged(nil, 20)
    end)

    it("oneway: the receiver gets nothing from the sender, the others "
       .. "still reach it", function()
        n:cut(net.rules("oneway", { from = 2, to = 1 }, n.hosts,
                        n.gateway, 1))
        assert.is_false(connects(n, 2, n.hosts[1], c.nodes[1].port))
        assert.is_true(connects(n, 3, n.hosts[1], c.nodes[1].port))
        assert.is_true(connects(n, 2, n.hosts[3], c.nodes[3].port))
        n:heal()
        assert.is_true(connects(n, 2, n.hosts[1], c.nodes[1].port))
    end)

    it("PostgreSQL listens on the bridge for the namespaces; pg_cut cuts "
       .. "one node from it alone", function()
        local srv = pg.start(nil, { listen = n.gateway, allow = n.cidr })
        local conninfo = srv.conninfo:gsub("host=127%.0%.0%.1",
            "host=" .. n.gateway):gsub("connect_timeout=%d+",
            "connect_timeout=2")
        local function query(i)
            local out, ok = sh(string.format("ip netns exec %s timeout 5 "
                .. "psql %s -XtAc 'SELECT 40 + 2'", n.names.ns[i],
                "'" .. conninfo .. "'"))
            return ok and out:match("^42") ~= nil, out
        end
        assert.is_true(query(1))
        assert.is_true(query(2))
        n:cut(net.rules("pg_cut", { node = 1 }, n.hosts, n.gateway,
                        srv.port))
        assert.is_false(query(1))
        assert.is_true(query(2))
        -- the node's own gateway is still reached from the root namespace
        assert.equal(200, (c.nodes[1]:http("GET", "/v1/health", nil,
                                           { max_time = 2 })))
        n:heal()
        assert.is_true(query(1))
        srv:stop()
    end)

    it("pg.start refuses a listen address or network that is not IPv4",
       function()
        for _, o in ipairs({ { listen = "10.1.2", allow = "10.1.2.0/24" },
                             { listen = "10.1.2.1", allow = "10.1.2.0" },
                             { listen = "10.1.2.1';x", allow = "a/24" },
                             { listen = "10.1.2.1" } }) do
            local ok, err = pcall(pg.start, nil, o)
            assert.is_false(ok)
            assert.truthy(tostring(err):find("must be an IPv4", 1, true),
                          err)
        end
    end)

    it("nemesis/run without nft fails with exit 2 and says so, starting "
       .. "nothing", function()
        -- nft lives in /usr/sbin on Debian
        local out, ok = sh("env PATH=/usr/bin:/bin luajit nemesis/run "
                           .. "--faults 0 2>&1; echo rc=$?")
        assert.truthy(ok)
        assert.truthy(out:find("needs `nft`", 1, true), out)
        assert.truthy(out:find("rc=2\n", 1, true), out)
        assert.falsy(out:find("network:", 1, true), out)
    end)

    it("--cleanup-net removes the names of a run that is gone, never a "
       .. "live run's", function()
        local dead = helpers.spawn({ "true" })
        assert.truthy(dead:wait(5))
        local id = dead.pid
        assert.same({}, left_of(id))
        assert(select(2, sh(string.format("ip netns add %s%d-1 && "
            .. "ip link add %s%d type bridge", net.NS, id, net.BRIDGE, id))))
        assert.equal(2, #left_of(id))
        local out, ok = sh("luajit nemesis/run --cleanup-net")
        assert.is_true(ok, out)
        assert.same({}, left_of(id))
        assert.equal(7, #left_of(n.id), out) -- 3 namespaces and veths, the bridge
    end)

    it("a run killed with SIGKILL leaves nothing: its guard removes its "
       .. "network", function()
        local out = helpers.tmpdir() .. "/out"
        local proc = helpers.spawn({ "luajit", "-e", [[
            package.path = "./?.lua;./spec/?.lua;" .. package.path
            local net = require "nemesis.net"
            local n = net.new(2)
            n:setup(".")
            io.write("up ", n.id, "\n")
            io.flush()
            require("helpers.node_proc").sleep(60)
        ]] }, { stdout = out })
        helpers.wait_until(function()
            return (helpers.read_file(out) or ""):find("up", 1, true)
        end, 20, "the child's network")
        assert.equal(5, #left_of(proc.pid)) -- 2 namespaces, 2 veths, bridge
        proc:send_signal(helpers.SIGKILL)
        assert.truthy(proc:wait(5))
        helpers.wait_until(function() return #left_of(proc.pid) == 0 end,
                           20, "the guard to remove the network")
    end)

    it("nemesis/run stopped by SIGTERM removes its network itself",
       function()
        local dir = helpers.tmpdir()
        local proc = helpers.spawn({ "luajit", "nemesis/run", "--seed", "1",
            "--faults", "0", "--keep", dir .. "/work" },
            { stdout = dir .. "/out" })
        helpers.wait_until(function()
            return #left_of(proc.pid) == 11 or proc:poll()
        end, 30, "the harness's network")
        assert.equal(11, #left_of(proc.pid)) -- 5 + 5 + the bridge
        proc:send_signal(helpers.SIGTERM)
        assert.truthy(proc:wait(30), "the harness did not exit")
        local out = helpers.read_file(dir .. "/out")
        assert.equal(2, proc.code, out)
        -- removed by the harness before it exited, not by its guard: its
        -- namespaces at once; their veth ends the kernel removes from a
        -- work queue after `ip netns del` returned (a fresh run saw one
        -- listed just after the exit), within seconds
        assert.same({}, namespaces_of(proc.pid))
        helpers.wait_until(function()
            return #left_of(proc.pid) == 0,
                table.concat(left_of(proc.pid), " ")
        end, 10, "the namespaces' links to go", 0.1)
        assert.same({}, left_of(proc.pid))
    end)

    it("teardown removes every namespace, veth and the bridge", function()
        helpers.stop_all()
        assert.equal(7, #left_of(n.id))
        local guard = n.guard_pid
        assert.is_nil(n:teardown())
        -- the kernel removes a deleted namespace's veth ends from a work
        -- queue, after `ip netns del` returned: gone within seconds
        helpers.wait_until(function()
            return #left_of(n.id) == 0, table.concat(left_of(n.id), " ")
        end, 10, "the namespaces' links to go", 0.1)
        assert.same({}, left_of(n.id))
        assert.is_nil(n:teardown()) -- again: nothing to do
        helpers.wait_until(function()
            return not helpers.pid_alive(guard)
        end, 5, "the guard gone")
    end)
end)

-- A graceful stop is graceful from the first moment a node can hold a
-- shard (issue 9): a node stopped with SIGTERM or SIGINT while it still
-- sees itself Joining -- the leader may already have made it Up and the
-- coordinator given it shards -- leaves through handoff like any member.
-- Under load (numbered tells to Seq entities, spec/fixtures/seqcheck.lua),
-- a third node is started and stopped at many moments of its join; after
-- each stop the process exits 0 within seconds, the other nodes list
-- only themselves (nothing is left behind owning shards), and at the end
-- every accepted tell arrived, in order, none dropped.

local helpers = require "helpers.node"
local seqload = require "helpers.seqload"

local format = string.format

local SHARDS = 32
local SIGINT = 2

-- The status of member `name` in node n's view, or nil (not listed).
local function status_of(n, name)
    local st, view = n:http("GET", "/v1/members", nil, { max_time = 1 })
    if st ~= 200 or type(view) ~= "table" then return "?" end
    local m = helpers.member(view, name)
    return m and m.status or nil
end

local owned = seqload.owned

describe("a node stopped during its join", function()
    local c
    local ids = {}
    for i = 1, 40 do ids[i] = "j" .. i end

    setup(function()
        c = seqload.cluster(3, SHARDS, { handoff_timeout = 3,
                                         rebalance_interval = 0.2 })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("leaves through handoff: nothing accepted is lost, no member is "
       .. "left behind", function()
        local n1, n2, n3 = c:node("n1"), c:node("n2"), c:node("n3")
        local run = seqload.start(c, { { n1, "a" }, { n2, "b" } }, ids)
        -- moments of the join: fixed delays after the launch, and the
        -- moment n1 first lists n3 Up (n3 may not know it yet)
        local moments = { "up", 0.3, "up", 0.8, "up", 1.5, "owns", "up" }
        local caught_joining = 0
        local n3_drops = 0
        for round, moment in ipairs(moments) do
            n3:launch()
            if moment == "up" or moment == "owns" then
                helpers.wait_until(function()
                    if moment == "owns" then
                        return owned(n1, "n3") > 0 or nil
                    end
                    return status_of(n1, "n3") == "up" or nil
                end, 15, "n1 to see n3 " .. moment, 0.002)
                -- what n3 believes of itself at that moment
                if status_of(n3, "n3") == "joining" then
                    caught_joining = caught_joining + 1
                end
            else
                -- from the moment n3's loop runs (its gateway answers):
                -- before that it has accepted nothing and has not caught
                -- the signals yet, and a slow start (a sanitizer build)
                -- would turn the moment into a kill at startup
                helpers.wait_until(function()
                    return n3:http("GET", "/v1/stats", nil,
                                   { max_time = 0.5 }) ~= 0 or nil
                end, 15, "n3's gateway to answer", 0.002)
                helpers.sleep(moment)
            end
            n3:signal(round % 2 == 0 and SIGINT or helpers.SIGTERM)
            local t0 = helpers.now()
            -- until it exits, n3's own drops: a stalled owner whose shard
            -- mailbox is full drops tells forwarded to it, counted there
            local seen = 0
            while not n3.proc:poll() and helpers.now() - t0 < 20 do
                local st, body = n3:http("GET", "/v1/stats", nil,
                                         { max_time = 0.5 })
                if st == 200 and type(body) == "table" then
                    seen = body.forward_drops
                    assert.are.equal(0, body.route_expired + body.handoff_drops)
                end
                helpers.sleep(0.02)
            end
            n3_drops = n3_drops + seen
            assert.is_true(n3.proc:poll(),
                           format("round %d (%s): n3 did not exit:\n%s",
                                  round, tostring(moment), n3:log()))
            assert.are.equal(0, n3.proc.code,
                             format("round %d: n3 exited with %s:\n%s",
                                    round, tostring(n3.proc.code),
                                    n3:log()))
            assert.is_true(helpers.now() - t0 < 15)
            -- n3 is gone from both views and owns nothing
            helpers.wait_until(function()
                for _, n in ipairs({ n1, n2 }) do
                    local s = status_of(n, "n3")
                    if s ~= nil then
                        return nil, format("%s sees n3 %s", n.name, s)
                    end
                end
                local k = owned(n1, "n3")
                return k == 0 or nil, k .. " shards on n3"
            end, 15, format("round %d: n3 to be removed", round), 0.05)
        end
        c:wait_converged({ "n1", "n2" })
        helpers.sleep(0.3)
        local results = seqload.finish(run)
        local total = 0
        for sender, r in pairs(results) do
            total = total + r.accepted
            for code in pairs(r.errors) do
                assert.is_truthy(code == "overflow" or code == "no_owner"
                                 or code == "timeout",
                                 sender .. " got error " .. code)
            end
        end
        assert.is_true(total > 100, total .. " tells accepted")
        local lost, gaps = 0, 0
        for _, id in ipairs(ids) do
            local state = seqload.arrived(results, n1, id)
            if state.gaps ~= 0 or state.reorders ~= 0 or state.double ~= 0 then
                -- what the nodes logged, for the diagnosis
                print(id .. ": " .. helpers.json.encode(state) .. "\n"
                      .. "owner: " .. helpers.json.encode(n1:owner("Seq", id)))
                for _, n in ipairs(c.nodes) do
                    for k = 1, n.runs do
                        local log = helpers.read_file(format("%s/%s.%d.log",
                            n.dir, n.name, k)) or ""
                        for line in log:gmatch("[^\n]*WARN[^\n]*") do
                            print(format("%s.%d: %s", n.name, k, line))
                        end
                    end
                end
            end
            for sender, r in pairs(results) do
                lost = lost + (r.last[id] or 0) - (state.got[sender] or 0)
            end
            gaps = gaps + state.gaps
            assert.are.equal(0, state.reorders, id .. " saw reorders")
            assert.are.equal(0, state.double, id .. " was active twice")
        end
        -- the handoffs lose nothing (no tell expired or dropped on the
        -- way); the one loss allowed is a tell dropped, and counted, by an
        -- owner whose mailbox was full (G3, G5), and every lost tell is
        -- one of those
        local counted = n3_drops
        for _, n in ipairs({ n1, n2 }) do
            local st = n:stats()
            assert.are.equal(0, st.route_expired, n.name .. " expired tells")
            assert.are.equal(0, st.handoff_drops, n.name .. " dropped tells")
            counted = counted + st.forward_drops
        end
        assert.are.equal(counted, lost, format("%d tells lost, %d counted "
                                               .. "as dropped", lost, counted))
        assert.is_true(gaps <= lost, gaps .. " gaps, " .. lost .. " lost")
        if lost > 0 then
            print(format("join_stop: %d tells dropped by a full mailbox, "
                         .. "all counted", lost))
        end
        -- the window this is about: at least once n3 was stopped while it
        -- still saw itself Joining (printed, not asserted: it is a race)
        print(format("join_stop: n3 was stopped %d times while it saw "
                     .. "itself joining", caught_joining))
    end)
end)

describe("a fresh cluster stopped at once", function()
    after_each(function()
        helpers.stop_all_checked()
    end)

    it("exits within seconds every time, each node with status 0",
       function()
        for round = 1, 4 do
            local c = helpers.cluster({
                size = 3,
                entities = { Counter = { module = "counter",
                                         shard_count = 16 } },
            })
            c:start()
            -- as soon as one node lists all three Up
            helpers.wait_until(function()
                for _, n in ipairs(c.nodes) do
                    local st, view = n:http("GET", "/v1/members", nil,
                                            { max_time = 1 })
                    if st == 200 and type(view) == "table" then
                        local up = 0
                        for _, m in ipairs(view.members) do
                            if m.status == "up" then up = up + 1 end
                        end
                        if up == 3 then return true end
                    end
                end
                return nil
            end, 15, "a node to list three members Up", 0.002)
            for _, n in ipairs(c.nodes) do
                n:signal(SIGINT)
            end
            local t0 = helpers.now()
            for _, n in ipairs(c.nodes) do
                assert.is_true(n.proc:wait(15),
                               format("round %d: %s did not exit:\n%s",
                                      round, n.name, n:log()))
                assert.are.equal(0, n.proc.code,
                                 format("round %d: %s exited %s:\n%s", round,
                                        n.name, tostring(n.proc.code),
                                        n:log()))
            end
            local took = helpers.now() - t0
            assert.is_true(took < 8, format("round %d: the cluster took "
                                            .. "%.1f s to stop", round, took))
        end
    end)

    it("a cluster that never formed (no node was ever Up) stops within "
       .. "seconds", function()
        -- n1, the first seed, alone may found the cluster; without it n2
        -- and n3 meet and stay Joining. Stopped then, no one can lead
        -- their leave: each must see that and go, not wait for its 25 s
        -- stop deadline (nor stay a member).
        local c = helpers.cluster({
            size = 3,
            entities = { Counter = { module = "counter", shard_count = 16 } },
        })
        c:start({ "n2", "n3" })
        helpers.wait_until(function()
            for _, name in ipairs({ "n2", "n3" }) do
                local st, view = c:node(name):http("GET", "/v1/members",
                                                   nil, { max_time = 1 })
                if st ~= 200 or type(view) ~= "table"
                    or #view.members ~= 2 then
                    return nil
                end
                for _, m in ipairs(view.members) do
                    assert.are.equal("joining", m.status)
                end
            end
            return true
        end, 15, "n2 and n3 to know each other")
        -- one by Ctrl-C, one through the admin endpoint (once answered
        -- 404 "this node cannot leave now" while Joining)
        local t0 = helpers.now()
        c:node("n2"):signal(SIGINT)
        local status, _, raw = c:node("n3"):admin("leave")
        assert.are.equal(202, status, raw)
        for _, name in ipairs({ "n2", "n3" }) do
            local n = c:node(name)
            assert.is_true(n.proc:wait(20), n.name .. " did not exit:\n"
                           .. n:log())
            assert.are.equal(0, n.proc.code, n:log())
        end
        local took = helpers.now() - t0
        assert.is_true(took < 8, format("the nodes took %.1f s to stop",
                                        took))
    end)
end)

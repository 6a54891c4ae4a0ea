-- moonshard.status: `moonshard status` laid out from a node's stats and
-- members.

local status = require "moonshard.status"
local cjson = require "cjson"

local function stats(over)
    local s = { node = "n2", cluster = "shop", version = "1.2.0",
                active_entities = 7, pending = 3, delivered = 40,
                activations = 9, passivations = 2, handler_errors = 1,
                asks_timed_out = 0, overflows = 0, slow_handlers = 0,
                local_routes = 30, remote_routes = 10, forwards = 5,
                route_buffered = 4, route_expired = 0, route_overflows = 0,
                owned_shards = 12, handoffs_in_progress = 1,
                shards_stopping = 0, shards_handed_off = 6,
                handoff_buffered = 11, handoff_overflows = 0,
                moves = { in_progress = 1, peak = 4, started = 9,
                          finished = 8, aborted = 0, rounds = 3,
                          strategy_errors = 0 },
                handoffs = { { type = "Order", shard = 17,
                               state = "buffering", from = "u1",
                               buffered = 1, for_ms = 250 } },
                frames_in = 100, frames_out = 90, rejected_frames = 0,
                auth_failures = 0, slow_peer_drops = 0, link_drops = 0 }
    for k, v in pairs(over or {}) do s[k] = v end
    return s
end

local function members(coordinator)
    return { self = "u2", leader = "u1", converged = true,
             coordinator = coordinator,
             members = {
                 { uid = "u1", name = "n1", address = "10.0.0.1:7101",
                   status = "leaving", reachable = false, roles = {} },
                 { uid = "u2", name = "n2", address = "10.0.0.2:7101",
                   status = "up", reachable = true,
                   roles = { "backend", "api" } },
             } }
end

local function render(s, m)
    return status.render(cjson.encode(s) .. "\n" .. cjson.encode(m))
end

local function lines(text)
    local t = {}
    for l in text:gmatch("([^\n]*)\n") do t[#t + 1] = l end
    return t
end

describe("moonshard.status", function()
    it("names the node, and the members in aligned columns", function()
        local l = lines(render(stats(), members("u1")))
        assert.equal("node n2 at 10.0.0.2:7101, cluster shop, moonshard "
                     .. "1.2.0", l[1])
        assert.equal("members: 2, converged", l[2])
        assert.equal("  n1  10.0.0.1:7101  leaving  UNREACHABLE  "
                     .. "coordinator", l[3])
        assert.equal("  n2  10.0.0.2:7101  up       reachable    "
                     .. "this node, roles backend,api", l[4])
    end)

    it("shows each moving shard with its old owner's name", function()
        local text = render(stats(), members("u1"))
        assert.matches("\n  Order  shard 17  buffering  from n1  1 message "
                       .. "waiting  for 0.3 s\n", text, 1, true)
        assert.matches("\nentities: 7 active, 3 pending; 40 delivered, 9 "
                       .. "activated, 2 passivated\n", text, 1, true)
        assert.matches("\nshards: 12 owned here; 1 moving, 0 stopping "
                       .. "here; 6 handed off\n", text, 1, true)
    end)

    it("shows the leases held, only on a node that has some", function()
        assert.not_matches("\nleases:", render(stats(), members("u1")))
        local none = { held = 0, acquired = 0, renewed = 0, released = 0,
                       lost = 0, expired = 0, fenced = 0, retries = 0,
                       refused = 0, rejected = 0, db_errors = 0,
                       waiting = 0, epochs = {}, epochs_count = 0 }
        assert.not_matches("\nleases:",
                           render(stats({ leases = none }), members("u1")))
        local some = { held = 4, acquired = 6, renewed = 90, released = 2,
                       lost = 1, expired = 0, fenced = 1, retries = 3,
                       refused = 2, rejected = 5, db_errors = 7,
                       waiting = 3, epochs = {}, epochs_count = 4 }
        assert.matches("\nleases: 4 held; 6 acquired, 90 renewed, 2 "
                       .. "released; 1 lost, 0 expired, 1 fenced, 2 refused, "
                       .. "7 database errors; 3 messages waiting, 5 "
                       .. "rejected\n",
                       render(stats({ leases = some }), members("u1")), 1,
                       true)
    end)

    it("shows remembered entities per type, only when there are some",
       function()
        assert.not_matches("\nremember", render(stats(), members("u1")))
        local idle = { queue_max = 10000, queued = 0, inflight = 0,
                       recorded = 0, errors = 0, eager_starts = 0,
                       types = {} }
        assert.not_matches("\nremember",
                           render(stats({ remember = idle }), members("u1")))
        local r = cjson.decode([[{"queue_max":10000,"queued":4,
          "inflight":2,"recorded":130,"coalesced":5,"cancelled":1,
          "drops":0,"abandoned":0,"resyncs":0,"writes":40,"written":124,
          "errors":3,"retries":3,"stale_answers":0,"failed_shards":2,
          "eager_starts":15,"eager_pending":7,"eager_dropped":0,"loads":4,
          "load_errors":1,
          "types":{"Order":{"store":"file","remembered":15,"failed":[7,3],
                            "shards":{"0":12,"5":3}},
                   "Session":{"store":"memory","remembered":0,"failed":[],
                              "shards":{}}}}]])
        local text = render(stats({ remember = r }), members("u1"))
        assert.matches("\nremember: 4 queued, 2 in flight (at most 10000); "
                       .. "40 writes, 3 errors, 3 retries, 0 dropped (queue "
                       .. "full); 15 eager starts, 7 pending; 2 failed "
                       .. "shards\n"
                       .. "  Order    file    15 remembered  in 2 shards  "
                       .. "FAILED shards 3,7\n"
                       .. "  Session  memory  0 remembered   in 0 shards\n"
                       .. "transport: ", text, 1, true)
        -- a remembered type with nothing yet is still listed
        idle.types = { Order = { store = "postgres", remembered = 0,
                                 failed = {}, shards = {} } }
        assert.matches("\nremember: 0 queued, 0 in flight (at most 10000); "
                       .. "? writes, 0 errors, ? retries, ? dropped (queue "
                       .. "full); 0 eager starts, ? pending; ? failed "
                       .. "shards\n  Order  postgres  0 remembered  in 0 "
                       .. "shards\n",
                       render(stats({ remember = idle }), members("u1")), 1,
                       true)
    end)

    it("shows the coordinator's moves only on the coordinator", function()
        assert.not_matches("moves %(coordinator%)",
                           render(stats(), members("u1")))
        local text = render(stats(), members("u2"))
        assert.matches("^node n2 at 10%.0%.0%.2:7101, cluster shop, "
                       .. "moonshard 1%.2%.0 %(coordinator%)\n", text)
        assert.matches("\nmoves (coordinator): 1 in progress (peak 4); 9 "
                       .. "started, 8 finished, 0 aborted; 3 rebalance "
                       .. "rounds, 0 strategy errors\n", text, 1, true)
    end)

    it("has no trailing blanks and ends with a newline", function()
        local text = render(stats({ handoffs = {} }), members(cjson.null))
        assert.equal("\n", text:sub(-1))
        assert.not_matches(" \n", text)
        assert.matches("not converged", render(stats(), (function()
            local m = members("u1")
            m.converged = false
            return m
        end)()), 1, true)
    end)

    it("shows ? for a counter the node did not send", function()
        local s = stats()
        s.frames_in = nil
        assert.matches("\ntransport: ? frames in, 90 out", render(s,
                       members("u1")), 1, true)
    end)

    it("raises on what is not a node's stats and members", function()
        assert.has_error(function() status.render("{}") end,
                         "not a node's stats and members")
        assert.has_error(function() status.render("{}\n[]") end,
                         "not a node's stats and members")
    end)

    describe("members", function()
        local function view(coordinator)
            local m = members(coordinator)
            m.members[1].version, m.members[1].weight = "1.2.0", 1
            m.members[1].up_number = 1
            m.members[2].version, m.members[2].weight = "1.3.0-rc1", 3
            m.members[2].up_number = 0
            return m
        end

        it("lays the members out as a table, the coordinator marked",
           function()
            assert.same({
                "2 members in the view of n2, converged",
                "   NAME  ADDRESS        STATUS   REACHABLE  ROLES"
                    .. "        VERSION    WEIGHT  UP",
                "*  n1    10.0.0.1:7101  leaving  NO         -"
                    .. "            1.2.0      1       1",
                "   n2    10.0.0.2:7101  up       yes        backend,api"
                    .. "  1.3.0-rc1  3       -   (this node)",
                "* coordinator",
            }, lines(status.members(cjson.encode(view("u1")))))
        end)

        it("says when there is no coordinator", function()
            local m = view(cjson.null)
            m.converged = false
            local l = lines(status.members(cjson.encode(m)))
            assert.equal("2 members in the view of n2, not converged", l[1])
            assert.matches("^  NAME", l[2])
            assert.matches("^  n1 ", l[3])
            assert.equal("no coordinator", l[5])
        end)

        it("raises on what is not a members answer", function()
            assert.has_error(function() status.members("[]") end,
                             "not a node's members answer")
            assert.has_error(function() status.members("{") end,
                             "not a node's members answer")
        end)
    end)
end)

-- Membership events (issue 15 item 2) on real nodes: the config's
-- on_member_event hook and the server-sent-events stream GET /v1/events
-- both see a join, a leave, a stopped node (SIGSTOP: unreachable, SIGCONT:
-- reachable) and a down, in this order and with the same numbers; a hook
-- that raises or runs away is logged and counted and later events still
-- reach it; the stream starts with a snapshot, is bounded in number and
-- ends when its node stops.

local helpers = require "helpers.node"

local json = helpers.json
local format = string.format

-- The hook of the config: appends "seq<TAB>kind<TAB>name<TAB>uid" per
-- event to DIR/hook-<node>.log, then misbehaves when `bad` says so.
local function hook_source(dir, bad)
    return format([[function(ev)
    local f = assert(io.open(%q .. "/hook-" .. ev.node .. ".log", "a"))
    local m = ev.member or {}
    f:write(ev.seq, "\t", ev.kind, "\t", m.name or "-", "\t",
            m.uid or "-", "\n")
    f:close()
    %s
end]], dir, bad or "")
end

-- The events of an SSE text: { id=, event=, data= (decoded) } in order,
-- comments left out; `text` may end inside an event (not yet whole).
local function sse_events(text)
    local out = {}
    for block in text:gmatch("(.-)\n\n") do
        local ev = {}
        for line in block:gmatch("[^\n]+") do
            local k, v = line:match("^(%a+): ?(.*)$")
            if k == "id" then
                ev.id = tonumber(v)
            elseif k == "event" then
                ev.event = v
            elseif k == "data" then
                ev.data = json.decode(v)
            end
        end
        if ev.event then
            out[#out + 1] = ev
        end
    end
    return out
end

-- The hook's lines of node `name`: { seq=, kind=, name=, uid= }.
local function hook_events(dir, name)
    local out = {}
    local text = helpers.read_file(dir .. "/hook-" .. name .. ".log") or ""
    for seq, kind, member, uid in
        text:gmatch("(%d+)\t([%w_]+)\t([^\t]+)\t([^\n]+)\n") do
        out[#out + 1] = { seq = tonumber(seq), kind = kind, name = member,
                          uid = uid }
    end
    return out
end

-- A stream of node n read by curl into a file (stopped by PID).
local function open_stream(n, dir, tag)
    local path = dir .. "/stream-" .. tag .. ".txt"
    local proc = helpers.spawn({ "curl", "-sN", "--max-time", "120",
                                 "http://" .. n.address .. "/v1/events" },
                               { stdout = path })
    return { proc = proc, path = path,
             events = function()
                 return sse_events(helpers.read_file(path) or "")
             end }
end

-- The member_* events about the members `names` (joining left out: a
-- member may be seen first Joining or first Up), as "kind name".
local function story(events, names)
    local out = {}
    for _, e in ipairs(events) do
        local kind, name = e.kind, e.name
        if names[name] and kind:match("^member_") and
            kind ~= "member_joining" then
            out[#out + 1] = kind .. " " .. name
        end
    end
    return out
end

local SETTINGS = { heartbeat_interval = 0.25, unreachable_after = 1.5,
                   gossip_interval = 0.2 }

describe("membership events", function()
    local c, dir, stream

    teardown(function()
        if stream then
            stream.proc:terminate(2)
        end
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("reach the hook and the stream alike, in order: a join, a leave, "
       .. "a stop and a continue, a down", function()
        dir = helpers.tmpdir()
        local settings = {}
        for k, v in pairs(SETTINGS) do settings[k] = v end
        settings.on_member_event = { __lua = hook_source(dir) }
        c = helpers.cluster({
            size = 3,
            entities = { Counter = { module = "counter", shard_count = 8 } },
            roles = { n3 = { "backend", "api" } },
            settings = settings,
        })
        local n1, n2, n3 = c:node("n1"), c:node("n2"), c:node("n3")
        c:start({ "n1", "n2" })
        c:wait_converged({ "n1", "n2" }, 15)

        -- the stream starts with a snapshot of the members
        stream = open_stream(n1, dir, "n1")
        local snap = helpers.wait_until(function()
            local evs = stream.events()
            return evs[1]
        end, 5, "the snapshot")
        assert.equal("snapshot", snap.event)
        assert.equal(snap.id, snap.data.seq)
        assert.equal("n1", snap.data.node)
        assert.equal(2, #snap.data.members.members)
        -- the hook saw n1's own history up to the snapshot
        local before = hook_events(dir, "n1")
        assert.is_true(#before >= 1)
        assert.equal(snap.id, before[#before].seq)

        -- a join
        c:start({ "n3" })
        c:wait_converged({ "n1", "n2", "n3" }, 15)
        local up = helpers.wait_until(function()
            for _, e in ipairs(stream.events()) do
                if e.event == "member_up" and e.data.member.name == "n3" then
                    return e
                end
            end
        end, 10, "member_up n3 on the stream")
        local m = up.data.member
        assert.equal(n3.listen, m.address)
        assert.same({ "backend", "api" }, m.roles)
        assert.matches("^%x+$", m.uid)
        assert.equal(16, #m.uid)
        assert.equal("up", m.status)
        assert.is_false(m.self)
        local v3 = helpers.member(n1:members(), "n3")
        assert.equal(v3.uid, m.uid)

        -- a leave: n3 goes Leaving, Exiting, Removed and stops
        local status, _, raw = n3:admin("leave", nil, c.admin_token)
        assert.equal(202, status, raw)
        assert.is_true(n3.proc:wait(20), "n3 did not stop after its leave")
        helpers.wait_until(function()
            return not helpers.member(n1:members(), "n3")
        end, 10, "n3 to be removed")

        -- a stop (unreachable) and a continue (reachable)
        n2:signal(helpers.SIGSTOP)
        helpers.wait_until(function()
            return helpers.member(n1:members(), "n2").reachable == false
        end, 10, "n1 to see n2 unreachable")
        n2:signal(helpers.SIGCONT)
        helpers.wait_until(function()
            return helpers.member(n1:members(), "n2").reachable == true
        end, 10, "n1 to see n2 reachable again")

        -- a down: n2 stopped, unreachable, downed through n1
        n2:signal(helpers.SIGSTOP)
        helpers.wait_until(function()
            return helpers.member(n1:members(), "n2").reachable == false
        end, 10, "n1 to see n2 unreachable again")
        status, _, raw = n1:admin("down", n2.listen, c.admin_token)
        assert.equal(202, status, raw)
        helpers.wait_until(function()
            return not helpers.member(n1:members(), "n2")
        end, 10, "n2 to be removed")
        n2:signal(helpers.SIGCONT)

        local want = {
            "member_up n3",
            "member_leaving n3", "member_exiting n3", "member_removed n3",
            "member_unreachable n2", "member_reachable n2",
            "member_unreachable n2",
            "member_downed n2", "member_removed n2",
        }
        local names = { n2 = true, n3 = true }
        -- the stream, after its snapshot
        local sse = helpers.wait_until(function()
            local evs = stream.events()
            local last = evs[#evs]
            if last and last.event == "member_removed"
                and last.data.member.name == "n2" then
                return evs
            end
        end, 10, "member_removed n2 on the stream")
        local from_stream = {}
        local last_id = snap.id
        for i = 2, #sse do
            local e = sse[i]
            assert.equal(e.id, e.data.seq)
            assert.equal(e.event, e.data.kind)
            assert.equal(last_id + 1, e.id, "the stream skipped an event")
            last_id = e.id
            local mem = e.data.member
            from_stream[#from_stream + 1] = {
                seq = e.id, kind = e.event,
                name = mem and mem ~= json.null and mem.name or "-",
                uid = mem and mem ~= json.null and mem.uid or "-" }
        end
        assert.same(want, story(from_stream, names))
        -- the hook: the same events, with the same numbers
        local hooked = helpers.wait_until(function()
            local evs = hook_events(dir, "n1")
            return evs[#evs] and evs[#evs].seq >= last_id and evs
        end, 10, "the hook to catch up")
        local after = {}
        for _, e in ipairs(hooked) do
            if e.seq > snap.id then after[#after + 1] = e end
        end
        assert.same(from_stream, after)
        assert.same(want, story(after, names))
        -- the leave also moved the coordinator? n1 stayed the oldest: no
        -- coordinator or leader change after the snapshot
        for _, e in ipairs(after) do
            assert.is_nil(e.kind:match("_changed$"), e.kind)
        end
        -- the node counts the events and no hook error
        local st = n1:stats()
        assert.equal(last_id, st.member_events)
        assert.equal(0, st.member_event_hook_errors)
        assert.equal(1, st.event_streams)
    end)
end)

-- Starts one node whose on_member_event hook is `source` (Lua text) and
-- waits for the hook's first three events, which must be the node's own
-- member_up, coordinator_changed and leader_changed. Returns the node
-- and those events.
local function start_hooked(dir, source)
    local n = helpers.start({
        entities = { Counter = { module = "counter" } },
        settings = { on_member_event = { __lua = source } },
    })
    local evs = helpers.wait_until(function()
        local e = hook_events(dir, "n1")
        return #e >= 3 and e
    end, 10, "three events in the hook")
    assert.same({ "member_up", "coordinator_changed", "leader_changed" },
                { evs[1].kind, evs[2].kind, evs[3].kind })
    return n, evs
end

describe("the on_member_event hook", function()
    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("that raises or runs away is logged and counted, and later events "
       .. "still reach it", function()
        local dir = helpers.tmpdir()
        -- member_up raises; coordinator_changed loops for ever, stopped
        -- by the budget; leader_changed comes after both
        local bad = [[
    if ev.kind == "member_up" then error("hook fails on purpose") end
    if ev.kind == "coordinator_changed" then while true do end end]]
        local n, evs = start_hooked(dir, hook_source(dir, bad))
        assert.same({ 1, 2, 3 }, { evs[1].seq, evs[2].seq, evs[3].seq })
        local st = n:stats()
        assert.equal(2, st.member_event_hook_errors)
        assert.equal(1, st.member_event_hook_timeouts)
        assert.equal(3, st.member_event_hook_calls)
        assert.is_true(n:alive())
        -- the node serves as before
        local status = n:ask("Counter", "c1", { type = "get" })
        assert.equal(200, status)
        local log = n:log()
        assert.matches("on_member_event failed:[^\n]*hook fails on purpose",
                       log)
        assert.matches("on_member_event ran past its budget of 1000 ms",
                       log, 1, true)
    end)

    it("that runs away inside its own pcall (a retry loop) is still "
       .. "stopped by its budget", function()
        local dir = helpers.tmpdir()
        -- the budget's error is caught by the hook's pcall: the call
        -- must end all the same, once, and the next events come
        local bad = [[
    if ev.kind == "member_up" then
        local ok = false
        while not ok do
            ok = pcall(function() while true do end end)
        end
    end]]
        local n = start_hooked(dir, hook_source(dir, bad))
        local st = n:stats()
        assert.equal(3, st.member_event_hook_calls)
        assert.equal(1, st.member_event_hook_errors)
        assert.equal(1, st.member_event_hook_timeouts)
        assert.equal(200, (n:ask("Counter", "c1", { type = "get" })))
    end)

    it("whose loop is in a helper function of the config is still "
       .. "stopped by its budget", function()
        local dir = helpers.tmpdir()
        -- a local function of the config, the hook's upvalue: compiled
        -- by the JIT, its loop would run no count hook
        local n = start_hooked(dir, format([[(function()
    local function spin(k)
        local x = 0
        while true do x = x + k end
    end
    local log = %s
    return function(ev)
        log(ev)
        if ev.kind == "member_up" then spin(1) end
    end
end)()]], hook_source(dir)))
        local st = n:stats()
        assert.equal(1, st.member_event_hook_timeouts)
        assert.equal(200, (n:ask("Counter", "c1", { type = "get" })))
    end)
end)

describe("GET /v1/events", function()
    local n, dir, streams = nil, nil, {}

    teardown(function()
        for _, s in ipairs(streams) do
            s.proc:terminate(2)
        end
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("serves text/event-stream, refuses streams past its limit with "
       .. "503, and keeps serving other requests", function()
        dir = helpers.tmpdir()
        -- room for the 16 streams and one more connection; a short
        -- http_timeout, which closes idle connections but not streams
        n = helpers.start({ entities = { Counter = { module = "counter" } },
                            limits = { http_connections = 17,
                                       http_timeout = 0.5 } })
        -- the head, from a HEAD request
        local _, out = helpers.run({ "curl", "-sI", "--max-time", "5",
                                     "http://" .. n.address
                                     .. "/v1/events" })
        assert.matches("HTTP/1.1 200", out, 1, true)
        assert.matches("Content-Type: text/event-stream", out, 1, true)
        for i = 1, 16 do
            streams[i] = open_stream(n, dir, tostring(i))
        end
        helpers.wait_until(function()
            return n:stats().event_streams == 16
        end, 10, "16 streams")
        for i = 1, 16 do
            helpers.wait_until(function()
                local e = streams[i].events()[1]
                return e and e.event == "snapshot"
            end, 5, "the snapshot of stream " .. i)
        end
        -- the 17th is refused
        local status, body = n:http("GET", "/v1/events")
        assert.equal(503, status)
        assert.equal("too_many_streams", body.error.code)
        assert.equal(1, n:stats().event_streams_refused)
        -- other requests are served while the streams stay open: each
        -- takes the one free place; no stream is evicted for it
        for i = 1, 20 do
            assert.equal(202, (n:tell("Counter", "c" .. i,
                                      { type = "incr" })))
        end
        assert.equal(200, (n:http("GET", "/v1/members")))
        -- and no stream is closed by http_timeout (0.5 s) either
        helpers.sleep(1.5)
        local st = n:stats()
        assert.equal(16, st.event_streams)
        for i = 1, 16 do
            assert.is_false(streams[i].proc:poll(), "stream " .. i
                            .. " ended")
        end
        -- an idle connection is still closed by it
        local idle = helpers.tcp_open(n.port)
        helpers.sleep(1.5)
        assert.is_true(n:stats().http_timeouts > st.http_timeouts)
        idle:close()
        -- a stream that ends frees its place
        streams[16].proc:terminate(2)
        helpers.wait_until(function()
            return n:stats().event_streams == 15
        end, 5, "the closed stream to be dropped")
        streams[16] = open_stream(n, dir, "again")
        helpers.wait_until(function()
            local e = streams[16].events()[1]
            return e and e.event == "snapshot"
        end, 5, "a new stream in its place")
    end)

    it("ends every stream when the node stops", function()
        n:stop(10)
        assert.is_false(n:alive(), "the node did not stop")
        for i, s in ipairs(streams) do
            assert.is_true(s.proc:wait(10), "stream " .. i .. " still open")
            -- curl exits 0: the body ended with the connection, as its
            -- head said (no length, Connection: close), not cut by a reset
            assert.equal(0, s.proc.code, "curl of stream " .. i)
        end
    end)
end)

describe("GET /v1/events under a small limits.http_connections", function()
    local streams = {}

    teardown(function()
        for _, s in ipairs(streams) do
            s.proc:terminate(2)
        end
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("leaves a place for other requests: streams never take every "
       .. "connection", function()
        local dir = helpers.tmpdir()
        local n = helpers.start({ entities = { Counter = { module = "counter" } },
                                  limits = { http_connections = 2 } })
        streams[1] = open_stream(n, dir, "1")
        helpers.wait_until(function()
            local e = streams[1].events()[1]
            return e and e.event == "snapshot"
        end, 5, "the snapshot")
        -- a second stream would take the last place: refused (curl
        -- bounded in time: a stream accepted would not end)
        local _, out = helpers.run({ "curl", "-s", "--max-time", "3",
                                     "-w", "\n%{http_code}",
                                     "http://" .. n.address
                                     .. "/v1/events" })
        local body, code = out:match("^(.*)\n(%d+)$")
        assert.equal("503", code, out)
        body = json.decode(body)
        assert.equal("too_many_streams", body.error.code)
        assert.matches("1 event streams at most", body.error.message, 1,
                       true)
        -- the gateway still answers
        assert.equal(200, (n:http("GET", "/v1/health")))
        assert.equal(200, (n:http("GET", "/v1/members")))
        assert.equal(1, n:stats().event_streams)
    end)
end)

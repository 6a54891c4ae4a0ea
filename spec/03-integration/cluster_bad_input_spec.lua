-- Bad input and faults on the node-to-node port of a real cluster
-- (issue 3): a node with a wrong secret never joins; garbage bytes, a
-- frame header with a payload length beyond the limit or another protocol
-- version are rejected and their connection closed; a peer that stops
-- reading is dropped and counted; a peer paused with SIGSTOP comes back
-- after SIGCONT. The cluster serves on after each.
--
-- One cluster of three nodes for the file; the tests run in order.

local helpers = require "helpers.node"

local MAX_MESSAGE = 4 * 1024 * 1024 -- limits.max_message_bytes

describe("a cluster's node port", function()
    local c, n1, n2, n3

    -- The 40-byte frame header (runtime/core/frame.h), little-endian.
    local function header(kind, version, payload_len)
        local function le(v, bytes)
            local t = {}
            for i = 1, bytes do
                t[i] = string.char(v % 256)
                v = math.floor(v / 256)
            end
            return table.concat(t)
        end
        return le(0x4D53, 2) .. string.char(version, kind) .. le(0, 2)
            .. le(0, 2) .. le(0, 2) .. le(0, 2) .. le(payload_len, 4)
            .. le(0, 8) .. le(0, 4) .. le(0, 4) .. le(0, 8)
    end

    -- Every node answers and the three are still one converged cluster.
    local function serves_on()
        c:wait_converged({ "n1", "n2", "n3" }, 10)
        for _, n in ipairs({ n1, n2, n3 }) do
            for i = 1, 6 do
                local status, body, raw = n:ask("Counter", "alive-" .. i,
                                                { type = "get" }, 5)
                assert.equal(200, status, n.name .. ": " .. raw)
                assert.is_number(body.value)
            end
        end
    end

    -- Sends `bytes` to node n's listen port; returns whether the node
    -- closed the connection and the bytes it answered.
    local function send_raw(n, bytes)
        local got, _, closed = helpers.tcp_exchange(n.listen_port, bytes, 3)
        return closed, got
    end

    -- An id of Counter that node `name` owns (allocating shards as needed).
    local function id_on(name)
        for i = 1, 200 do
            local id = "on-" .. name .. "-" .. i
            local o = n1:owner("Counter", id)
            if o.owner == helpers.json.null then
                n1:call("Counter", id, { type = "get" })
                o = n1:owner("Counter", id)
            end
            if o.owner == name then
                return id
            end
        end
        error("no id lands on " .. name)
    end

    setup(function()
        c = helpers.cluster({
            size = 3,
            entities = { Counter = { module = "counter", shard_count = 16 } },
            limits = { max_message_bytes = MAX_MESSAGE },
        })
        n1, n2, n3 = c:node("n1"), c:node("n2"), c:node("n3")
        c:start()
        c:wait_converged(nil, 10)
        -- shards go to a member only once the coordinator has its
        -- registration, which may come after the converged view
        n1:wait_placed_on("Counter", "n2")
        n1:wait_placed_on("Counter", "n3")
    end)

    teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    describe("garbage", function()
        it("counts garbage bytes as a rejected frame, closes that "
           .. "connection and serves on", function()
            local before = n2:stats()
            local junk = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            junk = junk .. string.rep("\0\255garbage", 8)
            local closed = send_raw(n2, junk)
            assert.is_true(closed, "the node kept the connection open")
            local after = n2:stats()
            assert.equal(before.rejected_frames + 1, after.rejected_frames)
            -- nothing reached an entity (frames_in moves with the peers'
            -- gossip, so it cannot tell)
            assert.is_number(before.delivered)
            assert.equal(before.delivered, after.delivered)
            serves_on()
        end)

        it("rejects a frame header whose payload length is beyond the "
           .. "limit and closes the connection at once", function()
            local before = n1:stats()
            local t0 = helpers.now()
            local closed = send_raw(n1, header(1, 1, 0xFFFFFFF0))
            assert.is_true(closed, "the node waited for the payload")
            assert.is_true(helpers.now() - t0 < 2)
            assert.equal(before.rejected_frames + 1,
                         n1:stats().rejected_frames)
            serves_on()
        end)

        it("rejects a payload length one past the limit", function()
            local before = n3:stats()
            local closed = send_raw(n3, header(1, 1, MAX_MESSAGE + 4096 + 1))
            assert.is_true(closed)
            assert.equal(before.rejected_frames + 1,
                         n3:stats().rejected_frames)
            serves_on()
        end)

        it("rejects a frame of another protocol version and closes the "
           .. "connection", function()
            local before = n2:stats()
            local closed = send_raw(n2, header(1, 99, 0))
            assert.is_true(closed)
            assert.equal(before.rejected_frames + 1,
                         n2:stats().rejected_frames)
            serves_on()
        end)

        it("refuses an entity frame before the handshake", function()
            local before = n1:stats()
            -- a TELL with an empty body, as the first frame
            local closed = send_raw(n1, header(10, 1, 2) .. "{}")
            assert.is_true(closed)
            local after = n1:stats()
            assert.is_number(before.delivered)
            assert.equal(before.delivered, after.delivered)
            assert.is_true(after.auth_failures + after.rejected_frames
                           > before.auth_failures + before.rejected_frames)
            serves_on()
        end)
    end)

    describe("a node with a wrong secret", function()
        local x

        teardown(function()
            if x then
                x:stop(1)
            end
        end)

        it("never becomes a member and is counted as an auth failure on "
           .. "both ends", function()
            x = c:new_node("x1")
            x.config = c:write_config("wrong-secret.lua",
                                      { secret = "not-the-cluster-secret" },
                                      { x })
            local before = n1:stats().auth_failures
            x:launch()
            x:wait_healthy()
            helpers.wait_until(function()
                return n1:stats().auth_failures > before
                    and x:stats().auth_failures > 0
            end, 10, "the handshakes to be refused")
            -- a few more gossip rounds: it stays outside
            local deadline = helpers.now() + 1.5
            repeat
                for _, n in ipairs({ n1, n2, n3 }) do
                    assert.is_nil(helpers.member(n:members(), "x1"), n.name)
                end
                helpers.sleep(0.1)
            until helpers.now() >= deadline
            local own = x:members()
            assert.equal(1, #own.members)
            assert.equal("x1", own.members[1].name)
            assert.are_not.equal("up", own.members[1].status)
            assert.is_true(x:alive())
            serves_on()
        end)

        it("stops within seconds on SIGTERM although it never joined",
           function()
            assert.is_true(x:alive())
            local t0 = helpers.now()
            local code, signal = x:stop(5)
            assert.is_nil(signal, "killed after 5 s")
            assert.equal(0, code, x:log())
            assert.is_true(helpers.now() - t0 < 5)
        end)
    end)

    describe("a peer that stops reading", function()
        it("is dropped and counted once its output queue is full, and the "
           .. "node serves on", function()
            local id = id_on("n3")
            local mine = { n1 = id_on("n1"), n2 = id_on("n2") }
            local before = n1:stats().slow_peer_drops
            local pad = string.rep("p", MAX_MESSAGE - 64)
            local body = '{"type":"incr","pad":"' .. pad .. '"}'
            n3:signal(helpers.SIGSTOP)
            local ok, err = pcall(function()
                local sent = 0
                helpers.wait_until(function()
                    local status = n1:tell("Counter", id, body)
                    assert.equal(202, status)
                    sent = sent + 1
                    return n1:stats().slow_peer_drops > before
                end, 15, "the slow peer to be dropped", 0)
                -- n1 and n2 answer their own ids while n3 is stopped
                for _, n in ipairs({ n1, n2 }) do
                    assert.equal(200, (n:ask("Counter", mine[n.name],
                                             { type = "get" }, 2)))
                end
            end)
            n3:signal(helpers.SIGCONT)
            assert(ok, err)
            serves_on()
            local status, _, raw = n2:ask("Counter", id, { type = "get" }, 5)
            assert.equal(200, status, raw)
        end)
    end)

    describe("a peer paused with SIGSTOP", function()
        local uid, id

        it("becomes unreachable on the others while it is stopped",
           function()
            c:wait_converged(nil, 10)
            uid = helpers.member(n1:members(), "n3").uid
            id = id_on("n3")
            n3:signal(helpers.SIGSTOP)
            local ok, err = pcall(helpers.wait_until, function()
                for _, n in ipairs({ n1, n2 }) do
                    local m = helpers.member(n:members(), "n3")
                    if m.reachable ~= false or m.status ~= "up" then
                        return nil, n.name .. " sees n3 "
                            .. helpers.json.encode(m)
                    end
                end
                return true
            end, 12, "n3 to be unreachable", 0.1)
            if not ok then
                n3:signal(helpers.SIGCONT)
                error(err, 0)
            end
        end)

        it("comes back reachable as the same member after SIGCONT",
           function()
            n3:signal(helpers.SIGCONT)
            local views = c:wait_converged({ "n1", "n2", "n3" }, 10)
            for _, v in pairs(views) do
                assert.equal(uid, helpers.member(v, "n3").uid)
            end
        end)

        it("serves its ids again from every node", function()
            for _, n in ipairs({ n1, n2, n3 }) do
                local status, body, raw = n:ask("Counter", id,
                                                { type = "get" }, 5)
                assert.equal(200, status, n.name .. ": " .. raw)
                assert.is_number(body.value)
            end
            assert.equal("n3", n1:owner("Counter", id).owner)
        end)
    end)
end)

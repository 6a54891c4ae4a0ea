-- The HTTP gateway's connection limits and protocol corners on a real
-- node: limits.http_timeout closes silent, slow (a byte now and then) and
-- idle connections but never an ask that waits for its entity;
-- limits.http_connections makes room by closing the longest idle
-- connection, else answers 503; HEAD, Expect: 100-continue, long and
-- non-UTF-8 ids in owner answers, one-letter type names.

local helpers = require "helpers.node"

local json = helpers.json

describe("the HTTP gateway's limits", function()
    local n
    local open = {}

    local function conn()
        local c = assert(helpers.tcp_open(n.port))
        open[#open + 1] = c
        return c
    end

    local function req(method, path, extra, body)
        return table.concat({ method, " ", path, " HTTP/1.1\r\nHost: x\r\n",
                              extra or "", body and ("Content-Length: "
                              .. #body .. "\r\n") or "", "\r\n",
                              body or "" })
    end

    setup(function()
        n = helpers.start({
            entities = {
                Counter = { module = "counter", shard_count = 4 },
                Sleeper = { module = "sleeper", shard_count = 4 },
                C = { module = "counter", shard_count = 2 },
            },
            limits = { http_timeout = 1, http_connections = 4 },
        })
    end)

    after_each(function()
        for _, c in ipairs(open) do c:close() end
        open = {}
        -- let the node see the closes before the next test counts
        helpers.wait_until(function()
            local ok, s = pcall(n.stats, n)
            return ok and s.http_connections <= 1
        end, 5, "the connections to close")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("closes a connection that sends nothing", function()
        local before = n:stats().http_timeouts
        local c = conn()
        local t0 = helpers.now()
        local got, closed = c:read(4)
        assert.is_true(closed)
        assert.equal("", got)
        local took = helpers.now() - t0
        assert.is_true(took >= 0.9 and took < 3, "closed after " .. took)
        assert.equal(before + 1, n:stats().http_timeouts)
    end)

    it("closes a request sent a byte now and then, counted from its "
       .. "first byte", function()
        local c = conn()
        local text = req("GET", "/v1/health")
        local t0 = helpers.now()
        local closed
        for i = 1, #text - 1 do
            if not c:send(text:sub(i, i)) then
                closed = true
                break
            end
            local _, eof = c:read(0.15)
            if eof then
                closed = true
                break
            end
        end
        assert.is_true(closed, "the request was let through")
        assert.is_true(helpers.now() - t0 < 3)
    end)

    it("closes a keep-alive connection idle past the limit", function()
        local c = conn()
        assert(c:send(req("GET", "/v1/health")))
        local got = c:read(2, "}")
        assert.matches("^HTTP/1%.1 200 ", got)
        assert.matches("Connection: keep%-alive", got)
        local rest, closed = c:read(3)
        assert.equal("", rest)
        assert.is_true(closed)
    end)

    it("lets an ask wait for its entity longer than the limit", function()
        local t0 = helpers.now()
        local status, body = n:ask("Sleeper", "s1",
                                   { type = "nap", seconds = 2 }, 5)
        assert.equal(200, status, json.encode(body))
        assert.equal(2, body.slept)
        assert.is_true(helpers.now() - t0 >= 1.9)
    end)

    it("answers a request pipelined behind an ask longer than the limit",
       function()
        local list = helpers.pipeline(n.port, {
            helpers.format_request(n.port, "POST",
                "/v1/entities/Sleeper/s2/ask?timeout=5",
                { type = "nap", seconds = 2 }, false),
            helpers.format_request(n.port, "GET", "/v1/health", nil, true),
        }, 10)
        assert.equal(2, #list)
        assert.equal(200, list[1].status, list[1].raw)
        assert.equal(200, list[2].status)
    end)

    it("answers requests that arrive while an ask is answered, in order",
       function()
        local c = conn()
        local nap = json.encode({ type = "nap", seconds = 0.5 })
        assert(c:send(req("POST", "/v1/entities/Sleeper/s4/ask?timeout=5",
                          nil, nap)))
        helpers.sleep(0.2) -- the ask waits: these come in later reads
        assert(c:send(req("GET", "/v1/entities/C/x4/owner")))
        assert(c:send(req("POST", "/v1/entities/C/x4/ask", nil,
                          json.encode({ type = "get" }))))
        local got = c:read(5, '"value"')
        local first = got:find('"slept"', 1, true)
        local second = got:find('"owner"', 1, true)
        local third = got:find('"value"', 1, true)
        assert.is_truthy(first, got)
        assert.is_truthy(second, got)
        assert.is_truthy(third, got)
        assert.is_true(first < second and second < third, got)
        local _, n200 = got:gsub("HTTP/1%.1 200 ", "")
        assert.equal(3, n200, got)
    end)

    it("answers an ask whose client half-closed after sending it, then "
       .. "closes", function()
        local c = conn()
        local nap = json.encode({ type = "nap", seconds = 0.3 })
        assert(c:send(req("POST", "/v1/entities/Sleeper/s5/ask?timeout=5",
                          nil, nap) .. req("GET", "/v1/health")))
        assert.is_true(c:shutdown())
        local got, closed = c:read(5)
        assert.is_true(closed, got)
        local a = got:find('"slept"', 1, true)
        local _, n200 = got:gsub("HTTP/1%.1 200 ", "")
        assert.is_truthy(a, got)
        assert.equal(2, n200, got)
    end)

    it("makes room for a new connection by closing the longest idle one",
       function()
        -- (no stats request while the node is full: it would count too)
        local idle = {}
        for i = 1, 4 do
            idle[i] = conn()
            helpers.sleep(0.05)
        end
        helpers.sleep(0.2)
        local c = conn()
        assert(c:send(req("GET", "/v1/health")))
        assert.matches("^HTTP/1%.1 200 ", (c:read(2, "}")))
        local _, closed = idle[1]:read(0.5)
        assert.is_true(closed, "the oldest idle one stayed open")
        for i = 2, 4 do
            local _, eof = idle[i]:read(0.05)
            assert.is_false(eof, "a newer idle one was closed")
        end
    end)

    it("answers 503 when every connection is busy", function()
        local before = n:stats().http_refused
        -- a connection that asks the stats until it is the only one open:
        -- none closing after its last answer is left to make room with
        local busy = { conn() }
        helpers.wait_until(function()
            assert(busy[1]:send(req("GET", "/v1/stats")))
            local got = busy[1]:read(2, "\r\n\r\n")
            local body_at = got:find("\r\n\r\n", 1, true) + 4
            local len = tonumber(got:match("Content%-Length: (%d+)"))
            while #got < body_at + len - 1 do
                local more, closed = busy[1]:read(0.2)
                assert(not closed, "the node closed the connection")
                got = got .. more
            end
            return got:match('"http_connections":1[,}]')
        end, 5, "the other connections to close")
        assert(busy[1]:send("GET /v1/health HTTP/1.1\r\nHost"))
        for i = 2, 4 do
            -- a request begun and not finished is not idle
            busy[i] = conn()
            assert(busy[i]:send("GET /v1/health HTTP/1.1\r\nHost"))
        end
        helpers.sleep(0.2)
        local c = conn()
        local got, closed = c:read(2)
        assert.matches("^HTTP/1%.1 503 ", got)
        assert.matches("too_many_connections", got, 1, true)
        assert.is_true(closed)
        for i = 1, 4 do
            busy[i]:close()
        end
        -- (a stats request may itself be refused until the node has seen
        -- the closes, and counts then too)
        local after = helpers.wait_until(function()
            local ok, s = pcall(n.stats, n)
            return ok and s
        end, 5, "the node to answer again")
        assert.is_true(after.http_refused >= before + 1)
    end)
end)

describe("the HTTP gateway's protocol corners", function()
    local n

    setup(function()
        n = helpers.start({
            entities = {
                Counter = { module = "counter", shard_count = 4 },
                C = { module = "counter", shard_count = 2 },
            },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("answers HEAD like GET without a body", function()
        local c = assert(helpers.tcp_open(n.port))
        assert(c:send("HEAD /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
                      .. "GET /v1/health HTTP/1.1\r\nHost: x\r\n"
                      .. "Connection: close\r\n\r\n"))
        local got = c:read(3)
        c:close()
        local head, after = got:match("^(HTTP/1%.1 200 .-\r\n\r\n)(.*)$")
        assert.is_string(head, got)
        local len = tonumber(head:match("Content%-Length: (%d+)"))
        assert.is_true(len > 0)
        -- no body after the HEAD's head: the GET's answer follows at once
        assert.matches("^HTTP/1%.1 200 ", after)
        assert.equal(len, #after:match("\r\n\r\n(.*)$"))
    end)

    it("answers HEAD on an entity's owner like GET", function()
        local c = assert(helpers.tcp_open(n.port))
        assert(c:send("HEAD /v1/entities/Counter/x/owner HTTP/1.1\r\n"
                      .. "Host: x\r\nConnection: close\r\n\r\n"))
        local got = c:read(3)
        c:close()
        assert.matches("^HTTP/1%.1 200 ", got)
        assert.equal("", got:match("\r\n\r\n(.*)$"))
    end)

    it("answers Expect: 100-continue before the body", function()
        local c = assert(helpers.tcp_open(n.port))
        local body = '{"type":"incr"}'
        assert(c:send("POST /v1/entities/Counter/e1/tell HTTP/1.1\r\n"
                      .. "Host: x\r\nContent-Type: application/json\r\n"
                      .. "Content-Length: " .. #body .. "\r\n"
                      .. "Expect: 100-continue\r\nConnection: close\r\n\r\n"))
        local first = c:read(2, "\r\n\r\n")
        assert.equal("HTTP/1.1 100 Continue\r\n\r\n", first)
        assert(c:send(body))
        local rest = c:read(3)
        c:close()
        assert.matches("^HTTP/1%.1 202 ", rest)
    end)

    it("refuses any other expectation with 417", function()
        local status, body = n:http("POST", "/v1/entities/Counter/e2/tell",
                                    { type = "incr" },
                                    { headers = { Expect = "magic" } })
        assert.equal(417, status)
        assert.equal("expectation_failed", body.error.code)
    end)

    it("writes owner answers as valid JSON whatever the id", function()
        local long = ("\""):rep(400)
        local status, body, raw = n:http("GET", "/v1/entities/Counter/"
                                         .. helpers.pct_encode(long)
                                         .. "/owner")
        assert.equal(200, status)
        assert.is_table(body, raw)
        assert.equal(long, body.id)
        status, body, raw = n:http("GET", "/v1/entities/Counter/a%FFb/owner")
        assert.equal(200, status)
        assert.is_table(body, raw)
        assert.equal("a\239\191\189b", body.id) -- U+FFFD for the bad byte
    end)

    it("serves the plan of a type with a one-letter name", function()
        local status, body = n:http("GET", "/v1/allocations/C")
        assert.equal(200, status)
        assert.equal(2, body.shard_count)
    end)
end)

-- The gateway's request heads are read strictly where a lenient reading
-- could be used against it (issue 9, item 7): whitespace before a
-- header's colon is a 400 (RFC 9112 5.1), the admin token counts only
-- from the request head (never from a chunked body's trailer), and a
-- token header that appears twice is a 400, not "the last one wins".

local helpers = require "helpers.node"

local json = helpers.json

describe("the HTTP gateway's strict request heads", function()
    local c, n, token

    setup(function()
        c = helpers.cluster_up({
            size = 1,
            secret = "spec-secret-7f3a9c2e41b8",
            admin_token = "spec-admin-token-5d1e7a93",
            entities = { Counter = { module = "counter", shard_count = 4 } },
        })
        n = c:node("n1")
        token = c.admin_token
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- Sends raw request bytes; returns status, decoded body, raw answer.
    local function raw(bytes)
        local got = helpers.tcp_exchange(n.port, bytes, 3)
        local status = tonumber(got:match("^HTTP/1%.1 (%d%d%d) "))
        return status, json.decode(got:match("\r\n\r\n(.*)$") or ""), got
    end

    local function still_up()
        assert.is_true(n:alive())
        assert.equal("up", helpers.member(n:members(), "n1").status)
    end

    it("answers 400 to whitespace before a header's colon", function()
        for _, line in ipairs({ "Host : x", "Host  : x", "Ho st: x",
                                "X-Moonshard-Token : " .. token }) do
            local status, body, got = raw("GET /v1/health HTTP/1.1\r\n"
                .. line .. "\r\nConnection: close\r\n\r\n")
            assert.equal(400, status, line .. ": " .. got)
            assert.equal("bad_request", body.error.code)
        end
        assert.equal(200, (n:http("GET", "/v1/health")))
    end)

    it("refuses an admin request whose token comes in a chunked trailer",
       function()
        local status, body, got = raw(
            "POST /v1/leave HTTP/1.1\r\nHost: x\r\n"
            .. "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .. "2\r\n{}\r\n0\r\nX-Moonshard-Token: " .. token .. "\r\n\r\n")
        assert.equal(403, status, got)
        assert.equal("forbidden", body.error.code)
        still_up()
    end)

    it("takes the token from the head of a chunked request with a trailer",
       function()
        -- (a move, not a leave: the node stays; 202, or 409 when the
        -- shard has no other place to go, but not 403)
        local status, _, got = raw(
            "POST /v1/move/Counter/0 HTTP/1.1\r\nHost: x\r\n"
            .. "X-Moonshard-Token: " .. token .. "\r\n"
            .. "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .. "0\r\nX-Moonshard-Token: wrong\r\n\r\n")
        assert.is_true(status == 202 or status == 409, got)
    end)

    it("answers 400 when the token header appears twice", function()
        for _, pair in ipairs({ { "wrong", token }, { token, token },
                                { token, "" } }) do
            local status, body, got = raw(
                "POST /v1/leave HTTP/1.1\r\nHost: x\r\n"
                .. "X-Moonshard-Token: " .. pair[1] .. "\r\n"
                .. "x-moonshard-token: " .. pair[2] .. "\r\n"
                .. "Content-Length: 0\r\nConnection: close\r\n\r\n")
            assert.equal(400, status, got)
            assert.equal("bad_request", body.error.code)
        end
        still_up()
    end)
end)

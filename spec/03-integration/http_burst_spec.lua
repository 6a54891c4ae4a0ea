-- The gateway keeps its promise under a burst of idle connections: a new
-- connection takes the place of one that never sent a byte (else the
-- longest idle), never its own, so ordinary clients are served while
-- thousands of silent connections are held open (issue 9, item 4).

local ffi = require "ffi"
local helpers = require "helpers.node"

if not pcall(ffi.typeof, "struct ms_spec_rlimit") then
    ffi.cdef [[
        struct ms_spec_rlimit { unsigned long cur, max; };
        int getrlimit(int resource, struct ms_spec_rlimit *rl);
        int setrlimit(int resource, const struct ms_spec_rlimit *rl);
        int getpid(void);
    ]]
end

local C = ffi.C
local RLIMIT_NOFILE = 7
local AF_INET, SOCK_STREAM = 2, 1
local SOL_SOCKET, SO_SNDTIMEO = 1, 21

local function nofile()
    local rl = ffi.new("struct ms_spec_rlimit")
    assert(C.getrlimit(RLIMIT_NOFILE, rl) == 0)
    return tonumber(rl.cur), tonumber(rl.max)
end

local function set_nofile(soft)
    local _, hard = nofile()
    local rl = ffi.new("struct ms_spec_rlimit")
    rl.cur, rl.max = soft, hard
    assert(C.setrlimit(RLIMIT_NOFILE, rl) == 0, "setrlimit failed")
end

-- A connection to 127.0.0.1:port that never sends a byte (a bare socket:
-- helpers.tcp_open keeps a 64 KiB buffer per connection).
local function silent(port)
    local fd = C.socket(AF_INET, SOCK_STREAM, 0)
    assert(fd >= 0, "socket failed (open-file limit?)")
    local tv = ffi.new("struct ms_spec_timeval")
    tv.tv_sec = 5
    C.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, tv, ffi.sizeof(tv))
    local sa = ffi.new("struct ms_spec_sockaddr_in")
    sa.family = AF_INET
    sa.port[0], sa.port[1] = math.floor(port / 256), port % 256
    sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
    if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
        C.close(fd)
        error("connect failed during the burst")
    end
    return fd
end

local held = {}

-- A keep-alive connection on which the node answers that it is the only
-- one open: no other, not even one closing after its last answer, is
-- left to make room with. Then it sends half a request, so it is busy.
local function alone_and_busy(port)
    local c = assert(helpers.tcp_open(port))
    helpers.wait_until(function()
        assert(c:send("GET /v1/stats HTTP/1.1\r\nHost: x\r\n\r\n"))
        local got = c:read(2, "\r\n\r\n")
        local body_at = got:find("\r\n\r\n", 1, true) + 4
        local len = tonumber(got:match("Content%-Length: (%d+)"))
        while #got < body_at + len - 1 do
            local more, closed = c:read(0.2)
            assert(not closed, "the node closed the connection")
            got = got .. more
        end
        return got:match('"http_connections":1[,}]')
    end, 5, "the other connections to close")
    assert(c:send("GET /v1/health HTTP/1.1\r\nHost"))
    return c
end

local function burst(port, count)
    for _ = 1, count do
        held[#held + 1] = silent(port)
    end
end

local function release()
    for _, fd in ipairs(held) do
        C.close(fd)
    end
    held = {}
end

-- GET /v1/health `times` times in a row, each given 1 s to answer.
local function health_answers(n, times)
    for i = 1, times do
        local status, body, raw, why = n:http("GET", "/v1/health", nil,
                                              { max_time = 1 })
        assert.equal(200, status, "check " .. i .. ": " .. tostring(why)
                     .. " " .. tostring(raw))
        assert.is_true(body.ok)
        helpers.sleep(0.1)
    end
end

-- Descriptors the spec process has open.
local function open_fds()
    local p = assert(io.popen("ls /proc/" .. C.getpid() .. "/fd"))
    local k = 0
    for _ in p:lines() do
        k = k + 1
    end
    p:close()
    return k
end

-- Starts a node whose own open-file limit starts low (1,024, as on many
-- hosts; more if the spec process has that many open, since the node
-- starts with them), and gives the spec process room for its bursts.
local function start(opts, need)
    local soft, hard = nofile()
    assert(hard >= need, ("this spec needs an open-file limit of %d, the "
                          .. "hard limit is %d"):format(need, hard))
    set_nofile(math.min(math.max(1024, open_fds() + 64), soft))
    local ok, n = pcall(helpers.start, opts)
    set_nofile(hard)
    assert(ok, n)
    return n
end

describe("the HTTP gateway under a burst of idle connections", function()
    local n

    after_each(function()
        release()
        helpers.stop_all_checked()
    end)

    it("serves health checks while 3,000 silent connections are held, "
       .. "burst after burst (default limits)", function()
        n = start({ entities = { Counter = { module = "counter" } } }, 3500)
        local _, hard = nofile()
        for _ = 1, 2 do
            if hard < 7000 then
                release() -- room for one burst only: the next is new
            end
            burst(n.port, 3000)
            health_answers(n, 10)
        end
        local s = n:stats()
        assert.is_true(s.http_connections <= 1024, s.http_connections)
        -- the node raised its own limit: 1,024 connections need more
        -- than the 1,024 descriptors it started with
        local limits = helpers.read_file("/proc/" .. n.pid .. "/limits")
        local nsoft, nhard = limits:match("Max open files%s+(%d+)%s+(%d+)")
        assert.equal(nhard, nsoft)
    end)

    it("serves health checks while 600 silent connections are held with "
       .. "http_connections = 256", function()
        n = start({ entities = { Counter = { module = "counter" } },
                    limits = { http_connections = 256 } }, 2000)
        for _ = 1, 2 do
            burst(n.port, 600)
            health_answers(n, 10)
        end
        local s = n:stats()
        assert.is_true(s.http_connections <= 256, s.http_connections)
    end)

    it("keeps a client that sent its request over silent ones",
       function()
        n = start({ entities = { Counter = { module = "counter" } },
                    limits = { http_connections = 8 } }, 2000)
        -- a request begun before the burst and finished after it
        local c = assert(helpers.tcp_open(n.port))
        assert(c:send("GET /v1/health HTTP/1.1\r\nHost: x\r\n"))
        helpers.sleep(0.1)
        burst(n.port, 50)
        assert(c:send("\r\n"))
        local got, closed = c:read(2, "}")
        c:close()
        assert.is_false(closed)
        assert.matches("^HTTP/1%.1 200 ", got)
    end)
end)

describe("a connection whose request waits unread", function()
    local n

    setup(function()
        n = helpers.start({
            entities = { Counter = { module = "counter" } },
            limits = { http_connections = 2 },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- With the node stopped (SIGSTOP), connections still complete in the
    -- kernel and requests wait in their sockets; on SIGCONT the node
    -- accepts them all before it reads any.
    local function while_stopped(fn)
        n:signal(helpers.SIGSTOP)
        local ok, err = pcall(fn)
        n:signal(helpers.SIGCONT)
        assert(ok, err)
    end

    local GET = "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"

    it("is not taken for a silent one when it was accepted with others",
       function()
        -- one slot held by a request under way, one left
        local busy = alone_and_busy(n.port)
        local sent, late
        while_stopped(function()
            sent = assert(helpers.tcp_open(n.port))
            assert(sent:send(GET))
            late = assert(helpers.tcp_open(n.port))
        end)
        local got = sent:read(2, "}")
        local refused = late:read(2)
        sent:close()
        late:close()
        busy:close()
        assert.matches("^HTTP/1%.1 200 ", got)
        assert.matches("^HTTP/1%.1 503 ", refused)
    end)

    it("is not taken for an idle one", function()
        local busy = alone_and_busy(n.port)
        local idle = assert(helpers.tcp_open(n.port))
        assert(idle:send(GET))
        assert.matches("^HTTP/1%.1 200 ", (idle:read(2, "}")))
        helpers.sleep(0.2)
        local late
        while_stopped(function()
            assert(idle:send(GET))
            late = assert(helpers.tcp_open(n.port))
        end)
        local got = idle:read(2, "}")
        late:close()
        idle:close()
        busy:close()
        assert.matches("^HTTP/1%.1 200 ", got)
    end)
end)

describe("a connection the gateway refuses", function()
    teardown(function()
        helpers.stop_all_checked()
    end)

    it("is closed at once, not kept to read what the client sends",
       function()
        local n = helpers.start({
            entities = { Counter = { module = "counter" } },
            limits = { http_connections = 4 },
        })
        local busy = { alone_and_busy(n.port) }
        for i = 2, 4 do
            -- a request begun and not finished: not idle, not evicted
            busy[i] = assert(helpers.tcp_open(n.port))
            assert(busy[i]:send("GET /v1/health HTTP/1.1\r\nHost"))
        end
        helpers.sleep(0.2)
        local c = assert(helpers.tcp_open(n.port))
        local got, closed = c:read(2)
        assert.matches("^HTTP/1%.1 503 ", got)
        assert.is_true(closed)
        -- a socket closed on the node's side answers data with a reset:
        -- the second send fails (a lingering one would read and discard)
        local sent = c:send("GET /v1/health HTTP/1.1\r\n\r\n")
        helpers.sleep(0.2)
        if sent then
            sent = c:send("x")
        end
        c:close()
        for i = 1, 4 do
            busy[i]:close()
        end
        assert.is_nil(sent, "the node kept the refused connection open")
    end)
end)

-- spec/helpers/node_http.lua: the network side of spec/helpers/node.lua
-- (which re-exports all of this; specs require "helpers.node", not this
-- module): free ports on 127.0.0.1, raw TCP exchanges and connections a
-- spec drives step by step, and a small blocking HTTP/1.1 client over
-- FFI sockets (one connection per request, or a pipeline).

local ffi = require "ffi"
local cjson = require("cjson.safe").new()
local node_proc = require "helpers.node_proc" -- declares the libc calls

local type, pairs, ipairs, tonumber = type, pairs, ipairs, tonumber
local error, assert, setmetatable = error, assert, setmetatable
local format, byte, gsub, match, find = string.format, string.byte,
    string.gsub, string.match, string.find
local concat, sort = table.concat, table.sort
local floor = math.floor
local errtext = node_proc.errtext

local H = {}

local C = ffi.C

local AF_INET, SOCK_STREAM = 2, 1
local SOL_SOCKET, SO_RCVTIMEO, SO_SNDTIMEO = 1, 20, 21
local MSG_NOSIGNAL = 0x4000
local EINTR = 4
local ECONNRESET = 104

-------------------------------------------------------------------------------
-- Ports

local issued = {}

-- A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read
-- the port back, close). Never the same port twice in one spec file.
function H.free_port()
    for _ = 1, 50 do
        local fd = C.socket(AF_INET, SOCK_STREAM, 0)
        assert(fd >= 0, "socket: " .. errtext())
        local sa = ffi.new("struct ms_spec_sockaddr_in")
        sa.family = AF_INET
        sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
        local len = ffi.new("uint32_t[1]", ffi.sizeof(sa))
        local ok = C.bind(fd, sa, ffi.sizeof(sa)) == 0
            and C.getsockname(fd, sa, len) == 0
        local why = not ok and errtext()
        C.close(fd)
        assert(ok, why)
        local port = sa.port[0] * 256 + sa.port[1]
        if not issued[port] then
            issued[port] = true
            return port
        end
    end
    error("no free port found")
end

-------------------------------------------------------------------------------
-- JSON, URLs

H.json = cjson

local function pct_encode(s)
    return (gsub(s, "[^%w%-%._~]", function(c)
        return format("%%%02X", byte(c))
    end))
end
H.pct_encode = pct_encode

local function entity_path(t, id, action)
    return format("/v1/entities/%s/%s/%s", pct_encode(t), pct_encode(id),
                  action)
end
H.entity_path = entity_path

-------------------------------------------------------------------------------
-- TCP

-- A peer: `port`, a number (on 127.0.0.1, as every spec uses it), or a
-- string "A.B.C.D:PORT" (a node in a network namespace: nemesis/net.lua).
-- Returns the four address bytes and the port; raises on anything else.
local function peer(port)
    if type(port) == "number" then
        return 127, 0, 0, 1, port
    end
    local a, b, c, d, p = match(tostring(port),
                                "^(%d+)%.(%d+)%.(%d+)%.(%d+):(%d+)$")
    a, b, c, d, p = tonumber(a), tonumber(b), tonumber(c), tonumber(d),
        tonumber(p)
    if not (a and a < 256 and b < 256 and c < 256 and d < 256
            and p < 65536) then
        error("not a port or an IPv4 address:port: " .. tostring(port), 3)
    end
    return a, b, c, d, p
end
H.peer = peer

-- The Host header's value for `port` (see peer).
local function host_of(port)
    if type(port) == "number" then
        return "127.0.0.1:" .. port
    end
    return tostring(port)
end

-- A TCP socket connected to `port` (127.0.0.1:port, or "A.B.C.D:PORT":
-- see peer) with send and receive timeouts of max_time seconds (none when
-- nil), or nil and why.
local function dial(port, max_time)
    local a, b, c, d
    a, b, c, d, port = peer(port)
    local fd = C.socket(AF_INET, SOCK_STREAM, 0)
    if fd < 0 then
        return nil, "socket: " .. errtext()
    end
    if max_time then
        local tv = ffi.new("struct ms_spec_timeval")
        tv.tv_sec = floor(max_time)
        tv.tv_usec = floor((max_time - floor(max_time)) * 1e6)
        C.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, tv, ffi.sizeof(tv))
        C.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, tv, ffi.sizeof(tv))
    end
    local sa = ffi.new("struct ms_spec_sockaddr_in")
    sa.family = AF_INET
    sa.port[0], sa.port[1] = floor(port / 256), port % 256
    sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = a, b, c, d
    if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
        local why = "connect: " .. errtext()
        C.close(fd)
        return nil, why
    end
    return fd
end

-- A blocking exchange of raw bytes with 127.0.0.1:port over a fresh TCP
-- connection: sends `bytes`, then reads until the peer closes or
-- `max_time` seconds pass without data. Returns every byte received,
-- an error text (nil when all went well) and `closed`: true when the
-- peer closed the connection (EOF or reset), false when the read timed
-- out with the connection still open.
function H.tcp_exchange(port, bytes, max_time)
    max_time = max_time or 30
    local fd, err = dial(port, max_time)
    if not fd then
        return "", err, false
    end
    local sent, len = 0, #bytes
    local why
    while sent < len do
        local k = C.send(fd, ffi.cast("const char *", bytes) + sent,
                         len - sent, MSG_NOSIGNAL)
        if k < 0 and ffi.errno() ~= EINTR then
            -- a peer that refuses a request (413) may close before it
            -- read all of it: its answer can still be there, so read on
            why = "send: " .. errtext()
            break
        end
        sent = sent + math.max(tonumber(k), 0)
    end
    local chunks, buf = {}, ffi.new("char[65536]")
    local closed
    while true do
        local k = C.recv(fd, buf, 65536, 0)
        if k > 0 then
            chunks[#chunks + 1] = ffi.string(buf, k)
        elseif k == 0 then
            closed = true
            break
        else
            local e = ffi.errno()
            if e ~= EINTR then
                closed = e == ECONNRESET
                why = "recv: " .. errtext()
                break
            end
        end
    end
    C.close(fd)
    return concat(chunks), why, closed
end

-- An open TCP connection to 127.0.0.1:port that a spec drives step by
-- step: c:send(bytes), c:read(max_time, want) -> bytes, closed (reads
-- what arrives within max_time seconds, until the peer closes or, with
-- `want`, until the bytes read contain that plain text), c:shutdown()
-- (half-closes its sending side), c:close().
-- Returns nil and why when it cannot connect.
local Conn = {}
Conn.__index = Conn

function H.tcp_open(port)
    local fd, err = dial(port)
    if not fd then
        return nil, err
    end
    return setmetatable({ fd = fd, buf = ffi.new("char[65536]") }, Conn)
end

function Conn:send(bytes)
    local sent = 0
    while sent < #bytes do
        local k = C.send(self.fd, ffi.cast("const char *", bytes) + sent,
                         #bytes - sent, MSG_NOSIGNAL)
        if k < 0 then
            if ffi.errno() ~= EINTR then
                return nil, "send: " .. errtext()
            end
        else
            sent = sent + tonumber(k)
        end
    end
    return true
end

function Conn:read(max_time, want)
    local chunks, deadline = {}, node_proc.now() + max_time
    while true do
        if want and find(concat(chunks), want, 1, true) then
            return concat(chunks), false
        end
        local left = deadline - node_proc.now()
        if left <= 0 then
            return concat(chunks), false
        end
        local tv = ffi.new("struct ms_spec_timeval")
        tv.tv_sec = floor(left)
        tv.tv_usec = math.max(floor((left - floor(left)) * 1e6), 1000)
        C.setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, tv, ffi.sizeof(tv))
        local k = C.recv(self.fd, self.buf, 65536, 0)
        if k > 0 then
            chunks[#chunks + 1] = ffi.string(self.buf, k)
        elseif k == 0 then
            return concat(chunks), true
        else
            local e = ffi.errno()
            if e == ECONNRESET then
                return concat(chunks), true
            elseif e ~= EINTR and e ~= 11 then -- EAGAIN: the timeout
                return concat(chunks), false
            end
        end
    end
end

-- Half-closes: the peer reads EOF, this side can still read.
function Conn:shutdown()
    return C.shutdown(self.fd, 1) == 0 -- SHUT_WR
end

function Conn:close()
    if self.fd then
        C.close(self.fd)
        self.fd = nil
    end
end

-------------------------------------------------------------------------------
-- HTTP

-- A blocking HTTP/1.1 exchange with 127.0.0.1:port over a fresh connection
-- (the request should say `Connection: close`: this reads until EOF).
-- Returns the status of the first response (0 when there was no valid
-- response), its raw body, an error text and all the bytes received.
local function exchange(port, request, max_time)
    local response, why = H.tcp_exchange(port, request, max_time)
    local status = tonumber(match(response, "^HTTP/1%.%d (%d%d%d) "))
    local head_end = find(response, "\r\n\r\n", 1, true)
    if not status or not head_end then
        return 0, "", why or "no valid response", response
    end
    return status, response:sub(head_end + 4), why, response
end

-- The bytes of one HTTP/1.1 request. `body`: nil, a string or a table
-- (JSON-encoded). `close`: ask the server to close after answering.
-- `headers`: extra header lines, { ["X-Name"] = "value" }.
function H.format_request(port, method, path, body, close, headers)
    if type(body) == "table" then
        body = assert(cjson.encode(body))
    end
    local head = {
        format("%s %s HTTP/1.1", method, path),
        "Host: " .. host_of(port),
    }
    if close then
        head[#head + 1] = "Connection: close"
    end
    if headers then
        local names = {}
        for name in pairs(headers) do
            names[#names + 1] = name
        end
        sort(names)
        for _, name in ipairs(names) do
            head[#head + 1] = name .. ": " .. headers[name]
        end
    end
    if body ~= nil then
        head[#head + 1] = "Content-Type: application/json"
        head[#head + 1] = "Content-Length: " .. #body
    end
    return concat(head, "\r\n") .. "\r\n\r\n" .. (body or "")
end

-- One HTTP request to 127.0.0.1:port (or "A.B.C.D:PORT": see peer).
-- `body`: nil (none), a string (sent
-- as is) or a table (JSON-encoded). Returns status (0 when there was no
-- response), the decoded JSON body (nil if not JSON), the raw body and an
-- error text. opts.max_time: seconds to wait for the answer (30);
-- opts.headers: extra headers (see format_request).
function H.request(port, method, path, body, opts)
    opts = opts or {}
    local req = H.format_request(port, method, path, body, true,
                                 opts.headers)
    local status, raw, why = exchange(port, req, opts.max_time or 30)
    return status, cjson.decode(raw), raw, why
end

-- Sends `requests` (from format_request; only the last one should close)
-- in one write on one connection, and reads every response. Returns a
-- list of { status =, body = decoded, raw = }, in the order they came.
function H.pipeline(port, requests, max_time)
    local _, _, why, response = exchange(port, concat(requests),
                                         max_time or 30)
    local list, pos = {}, 1
    while pos <= #response do
        local status = tonumber(match(response, "^HTTP/1%.%d (%d%d%d) ", pos))
        local head_end = find(response, "\r\n\r\n", pos, true)
        if not status or not head_end then
            break
        end
        local head = response:sub(pos, head_end)
        local len = tonumber(match(head:lower(), "\r\ncontent%-length: (%d+)"))
        if not len then
            break
        end
        local raw = response:sub(head_end + 4, head_end + 3 + len)
        list[#list + 1] = { status = status, body = cjson.decode(raw),
                            raw = raw }
        pos = head_end + 4 + len
    end
    return list, why
end

return H

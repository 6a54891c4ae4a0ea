-- A load generator for the PostgreSQL specs, run as its own process:
--
--   luajit spec/helpers/ledger_load.lua PORT SENDER IDS STOPFILE OUTFILE
--
-- One keep-alive HTTP connection to 127.0.0.1:PORT. In rounds, it asks
-- every Ledger id of IDS (comma-separated) {"type":"add","sender":SENDER,
-- "n":k,"k":k} as one pipelined batch, k counting 1, 2, 3, ... per id. A
-- 200 acknowledges k (its event committed): that id's next ask carries
-- k + 1. Any other answer is counted by its error code and the same k is
-- asked again in the next round (an ambiguous failure may have committed:
-- the journal may then hold k twice, which the specs read as such). It
-- stops when STOPFILE exists or its connection breaks, then writes
-- OUTFILE: {"sender":..,"acked":{id:[k...]},"errors":{code:count},
-- "rounds":N,"broken":bool}.

local ffi = require "ffi"
local cjson = require "cjson"

ffi.cdef [[
    struct ll_sockaddr_in {
        uint16_t family; uint8_t port[2]; uint8_t addr[4]; uint8_t zero[8];
    };
    int socket(int domain, int type, int protocol);
    int connect(int fd, const void *addr, uint32_t len);
    long send(int fd, const void *buf, size_t len, int flags);
    long recv(int fd, void *buf, size_t len, int flags);
    int close(int fd);
    int access(const char *path, int mode);
    int usleep(unsigned int usec);
]]
local C = ffi.C

local port, sender, idlist, stopfile, outfile = tonumber(arg[1]), arg[2],
    arg[3], arg[4], arg[5]
local ids = {}
for id in idlist:gmatch("[^,]+") do ids[#ids + 1] = id end

local function connect()
    local fd = C.socket(2, 1, 0)
    local sa = ffi.new("struct ll_sockaddr_in")
    sa.family = 2
    sa.port[0], sa.port[1] = math.floor(port / 256), port % 256
    sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
    if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
        C.close(fd)
        return nil
    end
    return fd
end

local buf = ffi.new("char[65536]")
local pending = ""

-- One HTTP response: status, body; nil when the connection broke.
local function response(fd)
    while true do
        local head_end = pending:find("\r\n\r\n", 1, true)
        if head_end then
            local status = tonumber(pending:match("^HTTP/1%.1 (%d%d%d)"))
            local len = tonumber(pending:sub(1, head_end):lower()
                                 :match("content%-length: *(%d+)")) or 0
            if #pending >= head_end + 3 + len then
                local body = pending:sub(head_end + 4, head_end + 3 + len)
                pending = pending:sub(head_end + 4 + len)
                return status, body
            end
        end
        local k = C.recv(fd, buf, 65536, 0)
        if k <= 0 then return nil end
        pending = pending .. ffi.string(buf, k)
    end
end

local next_k, acked = {}, {}
for _, id in ipairs(ids) do next_k[id] = 1; acked[id] = {} end
local errors, rounds, broken = {}, 0, false
local fd = connect()
if not fd then broken = true end

while fd and C.access(stopfile, 0) ~= 0 do
    local reqs = {}
    for i, id in ipairs(ids) do
        local body = cjson.encode({ type = "add", sender = sender,
                                    n = next_k[id], k = next_k[id] })
        reqs[i] = "POST /v1/entities/Ledger/" .. id .. "/ask?timeout=30 "
            .. "HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            .. "application/json\r\nContent-Length: " .. #body
            .. "\r\n\r\n" .. body
    end
    local data = table.concat(reqs)
    local sent = 0
    while sent < #data do
        local k = C.send(fd, ffi.cast("const char *", data) + sent,
                         #data - sent, 0x4000)
        if k <= 0 then break end
        sent = sent + k
    end
    for _, id in ipairs(ids) do
        local status, body = response(fd)
        if not status then
            broken = true
            break
        end
        if status == 200 then
            local list = acked[id]
            list[#list + 1] = next_k[id]
            next_k[id] = next_k[id] + 1
        else
            local ok, e = pcall(cjson.decode, body)
            local code = ok and type(e) == "table"
                and type(e.error) == "table" and e.error.code
                or tostring(status)
            errors[code] = (errors[code] or 0) + 1
        end
    end
    rounds = rounds + 1
    if broken then break end
    C.usleep(2000)
end
if fd then C.close(fd) end

local f = assert(io.open(outfile .. ".tmp", "w"))
f:write(cjson.encode({ sender = sender, acked = acked, errors = errors,
                       rounds = rounds, broken = broken }))
f:close()
os.rename(outfile .. ".tmp", outfile)

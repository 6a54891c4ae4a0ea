-- A load generator for the handoff specs, run as its own process:
--
--   luajit spec/helpers/loader.lua PORT SENDER IDS STOPFILE OUTFILE [MODE]
--
-- MODE "ledger" (the PostgreSQL specs) asks Ledger entities instead:
-- {"type":"add","sender":SENDER,"n":k,"k":k} with ?timeout=30; a 200
-- acknowledges k (its event committed) and the output gains "acked":
-- {id:[k...]}; any other answer asks the same k again (an ambiguous
-- failure may have committed: the journal may then hold k twice).
--
-- One keep-alive HTTP connection to 127.0.0.1:PORT. In rounds, it tells
-- every id of IDS (comma-separated) {"type":"n","sender":SENDER,"n":k}
-- as one pipelined batch, k counting 1, 2, 3, ... per id. A tell answered
-- 202 was accepted: that id's next tell carries k + 1. Any other answer is
-- an explicit refusal, counted by its code, and the same k is sent again
-- in the next round, so an entity must see every id's numbers in order
-- with no gap. It stops when STOPFILE exists, then writes OUTFILE:
-- {"sender":..,"last":{id:k accepted last},"errors":{code:count},
--  "accepted":N,"rounds":N}.

local ffi = require "ffi"
local cjson = require "cjson"

ffi.cdef [[
    struct ld_sockaddr_in {
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
local ledger = arg[6] == "ledger"
local ids = {}
for id in idlist:gmatch("[^,]+") do ids[#ids + 1] = id end

local function connect()
    local fd = C.socket(2, 1, 0)
    local sa = ffi.new("struct ld_sockaddr_in")
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

-- Reads one HTTP response: status, body (nil on a broken connection).
local function read_response(fd)
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

local next_n, last, acked = {}, {}, {}
for _, id in ipairs(ids) do next_n[id] = 1; last[id] = 0; acked[id] = {} end
local errors, accepted, rounds = {}, 0, 0
local fd = connect()

while C.access(stopfile, 0) ~= 0 do
    if not fd then
        errors.connect = (errors.connect or 0) + 1
        C.usleep(50000)
        fd = connect()
    else
        local reqs = {}
        for i, id in ipairs(ids) do
            local k = next_n[id]
            local body = ledger and cjson.encode({ type = "add", k = k,
                                                   sender = sender, n = k })
                or cjson.encode({ type = "n", sender = sender, n = k })
            reqs[i] = (ledger and "POST /v1/entities/Ledger/" .. id
                          .. "/ask?timeout=30"
                          or "POST /v1/entities/Seq/" .. id .. "/tell")
                .. " HTTP/1.1\r\n"
                .. "Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                .. "Content-Length: " .. #body .. "\r\n\r\n" .. body
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
            local status, body = read_response(fd)
            if not status then
                -- the answers of this batch are lost: the connection broke
                -- (its node stopped). Whether the rest arrived is unknown,
                -- which a tell never promises: give up on this id set.
                errors.broken = (errors.broken or 0) + 1
                C.close(fd)
                fd = nil
                pending = ""
                break
            end
            if status == (ledger and 200 or 202) then
                local list = acked[id]
                list[#list + 1] = next_n[id]
                last[id] = next_n[id]
                next_n[id] = next_n[id] + 1
                accepted = accepted + 1
            else
                local ok, e = pcall(cjson.decode, body)
                local code = ok and type(e) == "table"
                    and type(e.error) == "table" and e.error.code
                    or tostring(status)
                errors[code] = (errors[code] or 0) + 1
            end
        end
        rounds = rounds + 1
        if fd == nil then break end
    end
end
if fd then C.close(fd) end

local f = assert(io.open(outfile .. ".tmp", "w"))
f:write(cjson.encode({ sender = sender, last = last, errors = errors,
                       accepted = accepted, rounds = rounds,
                       acked = ledger and acked or nil }))
f:close()
os.rename(outfile .. ".tmp", outfile)

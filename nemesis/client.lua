-- nemesis/client.lua: one client process of the nemesis workload, started
-- by nemesis/run (a process, since the spec helpers' HTTP client blocks).
--
--   luajit nemesis/client.lua SEED NAME PORTS HISTORY STOPFILE REGISTERS
--
-- Until the file STOPFILE exists, it asks random nodes' gateways (PORTS:
-- comma-separated HTTP ports on 127.0.0.1, or A.B.C.D:PORT entries) with
-- a fresh Idempotency-Key per operation: Register cas/read/write, Counter
-- add, Seq tells and `who` asks (which activation answers), and
-- appends one call record per attempt to HISTORY in the checker's format
-- (nemesis/README.md). No retries: an unknown call stays unknown. The
-- Seq tells of one client all go through one node (one sender, G2).

local root = (arg[0]:match("^(.*)/nemesis/[^/]*$") or ".")
package.path = root .. "/spec/?.lua;" .. package.path

local node = require "helpers.node"
local cjson = require "cjson"

local seed, name, ports_arg, out_path, stop_file, nregs =
    tonumber(arg[1]), arg[2], arg[3], arg[4], arg[5], tonumber(arg[6])
assert(seed and name and ports_arg and out_path and stop_file and nregs,
       "usage: client.lua SEED NAME PORTS HISTORY STOPFILE REGISTERS")

local ports = {}
for p in ports_arg:gmatch("[^,]+") do ports[#ports + 1] = tonumber(p) or p end

math.randomseed(seed)
local random = math.random
local out = assert(io.open(out_path, "a"))
out:setvbuf("line")

local ASK_TIMEOUT = 3      -- the runtime's ask timeout, seconds
local MAX_TIME = 5         -- the socket's, seconds
local seq_n = {}           -- per Seq entity, the last number sent
local known = {}           -- per register, the last value seen
local serial = 0
-- G2 orders the messages of one sender, and the sender of an HTTP tell is
-- the gateway's node: each client sends its Seq tells through one node
-- (while that node is down they fail with connection_refused: gaps)
local seq_port = ports[(tonumber(name:match("%d+")) or 0) % #ports + 1]

local function ms() return node.now() * 1000 end

local function stopped()
    local f = io.open(stop_file, "r")
    if f then f:close() return true end
    return false
end

-- one attempt: the call record, filled in with outcome, value, error
local function call(rec, path, body, port)
    port = port or ports[random(#ports)]
    rec.client, rec.start = name, ms()
    local status, reply, _, why = node.request(port, "POST", path,
        cjson.encode(body), { max_time = MAX_TIME,
        headers = { ["Idempotency-Key"] = rec.op_id } })
    if status == 200 or status == 202 then
        rec.outcome, rec["end"] = "ok", ms()
        rec.value = type(reply) == "table" and reply or nil
    elseif status == 0 then
        if why and why:find("refused", 1, true) then
            rec.outcome, rec["end"] = "fail", ms()
            rec.error = "connection_refused"
        else
            rec.outcome = "unknown"
        end
    else
        local code = type(reply) == "table" and type(reply.error) == "table"
            and reply.error.code or ("http_" .. status)
        rec.outcome, rec["end"], rec.error = "fail", ms(), code
    end
    out:write(cjson.encode(rec), "\n")
    return rec
end

local function path(t, id, action)
    return "/v1/entities/" .. t .. "/" .. id .. "/" .. action
        .. (action == "ask" and ("?timeout=" .. ASK_TIMEOUT) or "")
end

while not stopped() do
    serial = serial + 1
    local op = name .. "-" .. serial
    local r = random()
    if r < 0.6 then
        local id = "r" .. random(nregs)
        local k = random()
        local value = serial -- unique per client; with the name, per run
        value = name .. ":" .. value
        local rec
        if k < 0.7 then
            local expect = known[id]
            if expect == nil then expect = cjson.null end
            rec = call({ op_id = op, kind = "cas", type = "Register",
                         id = id, args = { expect = expect, value = value } },
                       path("Register", id, "ask"),
                       { type = "cas", expect = expect, value = value,
                         op = op })
            if rec.outcome == "ok" and rec.value then
                if rec.value.ok then known[id] = value
                else known[id] = rec.value.current end
            end
        elseif k < 0.9 then
            rec = call({ op_id = op, kind = "read", type = "Register",
                         id = id, args = {} },
                       path("Register", id, "ask"), { type = "read" })
            if rec.outcome == "ok" and rec.value then
                known[id] = rec.value.value
            end
        else
            rec = call({ op_id = op, kind = "write", type = "Register",
                         id = id, args = { value = value } },
                       path("Register", id, "ask"),
                       { type = "write", value = value, op = op })
            if rec.outcome == "ok" then known[id] = value end
        end
        if known[id] == cjson.null then known[id] = nil end
    elseif r < 0.85 then
        local id = "c" .. random(4)
        call({ op_id = op, kind = "add", type = "Counter", id = id,
               args = { n = 1 } }, path("Counter", id, "ask"),
             { type = "add", n = 1, op = op })
    elseif r < 0.95 then
        local id = "s" .. random(4)
        seq_n[id] = (seq_n[id] or 0) + 1
        call({ op_id = op, kind = "seq_tell", type = "Seq", id = id,
               args = { n = seq_n[id] } }, path("Seq", id, "tell"),
             { type = "seq", sender = name, g = serial, n = seq_n[id] },
             seq_port)
    else
        -- which activation answers (nemesis/activations.lua); through any
        -- node, not part of the Seq sender's numbered tells
        local id = "s" .. random(4)
        call({ op_id = op, kind = "who", type = "Seq", id = id, args = {} },
             path("Seq", id, "ask"), { type = "who" })
    end
end
out:close()

-- spec/helpers/node.lua: real moonshard node processes for the runtime and
-- integration specs (spec/02-runtime, spec/03-integration).
--
--     local helpers = require "helpers.node"
--     local n
--     setup(function()
--         n = helpers.start({ entities = { Counter = { module = "counter" } } })
--     end)
--     teardown(function() helpers.stop_all() end)
--     it("...", function()
--         local status, body = n:ask("Counter", "c1", { type = "get" })
--     end)
--
-- Processes are started with posix_spawnp through the LuaJIT FFI (no
-- luasocket or luaposix needed), so each one is a direct child of the spec
-- process: it is stopped by PID (SIGTERM, then SIGKILL after a deadline),
-- reaped with waitpid, and its exit status is known. `stop_all()` stops
-- every node a spec file started; `leaks()` lists the processes it
-- started that still exist (the leak check, {} after stop_all()). As a last resort a finalizer kills leftovers when
-- the helper module is collected or the VM closes.
--
-- A node's config is generated into a fresh temp dir (the config's folder
-- is on the node's module path, so `files` written there can be behavior
-- modules, say a broken one) and starts with
--     package.path = "<repo>/spec/fixtures/?.lua;" .. package.path
-- so the fixture behaviors in spec/fixtures/ load by name. Ports come from
-- binding 127.0.0.1:0; a node that loses the race for its port is started
-- again on new ports.
--
-- HTTP requests use a small blocking client over FFI sockets (one
-- connection per request); the moonshard CLI is run with
-- `helpers.moonshard(...)`. Load generators may spawn curl.
--
-- Environment: MOONSHARD_BIN (default build/moonshard), MOONSHARD_HOME
-- (default the current directory, the repository root), MOONSHARD_KEEP_TMP
-- (set: keep temp dirs for a post-mortem).
--
-- This module keeps nodes and clusters; it re-exports the process side
-- (clock, files, spawn and the leak check: spec/helpers/node_proc.lua)
-- and the network side (ports, TCP, the HTTP client:
-- spec/helpers/node_http.lua), so specs need only require "helpers.node".

local node_proc = require "helpers.node_proc"
local node_http = require "helpers.node_http"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local error, assert, setmetatable = error, assert, setmetatable
local format, match, find = string.format, string.match, string.find
local concat, sort = table.concat, table.sort
local floor = math.floor

local M = {}

-- The public API of node_proc and node_http, as before the split.
for _, k in ipairs({ "SIGKILL", "SIGTERM", "SIGSTOP", "SIGCONT", "now",
                     "sleep", "wait_until", "home", "bin", "fixtures",
                     "read_file", "write_file", "tmpdir", "cleanup",
                     "spawn", "pid_alive", "running", "leaks", "run",
                     "must", "exists",
                     "moonshard", "scratch", "_sentinel" }) do
    M[k] = node_proc[k]
end
for _, k in ipairs({ "free_port", "json", "pct_encode", "tcp_exchange",
                     "tcp_open", "format_request", "request", "pipeline",
                     "entity_path" }) do
    M[k] = node_http[k]
end

local children = node_proc.children
local SIGKILL, SIGTERM, SIGCONT = M.SIGKILL, M.SIGTERM, M.SIGCONT
local cjson = node_http.json
local pct_encode, entity_path = node_http.pct_encode, node_http.entity_path

-------------------------------------------------------------------------------
-- Lua literals

local function is_ident(k)
    return type(k) == "string" and match(k, "^[%a_][%w_]*$") ~= nil
end

-- A Lua literal for plain data (sorted keys, so configs are stable).
local function literal(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "string" then
        return format("%q", v)
    elseif t == "number" then
        if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
            return format("%d", v)
        end
        return format("%.17g", v)
    elseif t == "boolean" or t == "nil" then
        return tostring(v)
    elseif t ~= "table" then
        error("cannot write a " .. t .. " into a config", 2)
    elseif type(v.__lua) == "string" then
        return v.__lua -- a Lua expression, written as is
    end
    local keys, n = {}, #v
    for k in pairs(v) do
        if not (type(k) == "number" and k >= 1 and k <= n and k == floor(k)) then
            keys[#keys + 1] = k
        end
    end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local inner = indent .. "    "
    local parts = {}
    for i = 1, n do
        parts[#parts + 1] = inner .. literal(v[i], inner)
    end
    for _, k in ipairs(keys) do
        local key = is_ident(k) and k or ("[" .. literal(k) .. "]")
        parts[#parts + 1] = inner .. key .. " = " .. literal(v[k], inner)
    end
    if #parts == 0 then
        return "{}"
    end
    return "{\n" .. concat(parts, ",\n") .. ",\n" .. indent .. "}"
end
M.literal = literal

-------------------------------------------------------------------------------
-- Nodes

-- The gossip_interval every config of this module gets unless its
-- opts.settings names one (false: none, the node's default of 1 s). A
-- node that stops removes itself from the cluster at a gossip round, so
-- at the default each stop took up to a second per node (a 3-node
-- cluster's teardown about 3 s); 0.2 s is what the membership specs
-- already used, and well within seed_timeout / 2 (5 s / 2).
M.GOSSIP_INTERVAL = 0.2

-- opts.settings with the gossip_interval default filled in (a copy)
local function with_defaults(settings)
    local t = { gossip_interval = M.GOSSIP_INTERVAL }
    for k, v in pairs(settings or {}) do
        t[k] = v
    end
    if t.gossip_interval == false then t.gossip_interval = nil end
    return t
end

local Node = {}
Node.__index = Node

local nodes = {} -- started by this spec file, in order

-- The source of a generated config script.
local function config_source(opts, listen_port, http_port)
    local lines = {
        "-- generated by spec/helpers/node.lua",
        format("package.path = %q .. package.path",
               M.fixtures .. "/?.lua;"),
        "return {",
        format("    cluster = %q,", opts.cluster or "spec"),
        -- opts.node_fields: more fields of the node's entry (a string)
        format("    nodes = { { name = %q, listen = \"127.0.0.1:%d\","
               .. " http = \"127.0.0.1:%d\"%s } },", opts.name or "n1",
               listen_port, http_port,
               opts.node_fields and (", " .. opts.node_fields) or ""),
        "    entities = " .. literal(opts.entities, "    ") .. ",",
    }
    if opts.limits then
        lines[#lines + 1] = "    limits = " .. literal(opts.limits, "    ")
            .. ","
    end
    -- opts.settings: more top-level fields, e.g. stuck_handler_ms
    local settings = with_defaults(opts.settings)
    local keys = {}
    for k in pairs(settings) do keys[#keys + 1] = k end
    sort(keys)
    for _, k in ipairs(keys) do
        lines[#lines + 1] = format("    %s = %s,", k,
                                   literal(settings[k], "    "))
    end
    lines[#lines + 1] = "}"
    return concat(lines, "\n") .. "\n"
end

-- Writes a config for `opts` into a fresh temp dir; returns its path, dir.
-- opts.entities (required), opts.limits, opts.settings (other top-level
-- fields), opts.name, opts.cluster, opts.files = { ["name.lua"] = text }
-- written beside the config.
function M.write_config(opts, listen_port, http_port)
    local dir = M.tmpdir()
    for name, text in pairs(opts.files or {}) do
        M.write_file(dir .. "/" .. name, text)
    end
    local path = dir .. "/cluster.lua"
    M.write_file(path, config_source(opts, listen_port or M.free_port(),
                                     http_port or M.free_port()))
    return path, dir
end

local function launch(opts)
    local listen_port, http_port = M.free_port(), M.free_port()
    local path, dir = M.write_config(opts, listen_port, http_port)
    local n = setmetatable({
        dir = dir,
        config = path,
        log_path = dir .. "/node.log",
        -- opts.stderr_apart: the log lines (stderr) in a file of their own
        stderr_path = opts.stderr_apart and dir .. "/stderr.log" or nil,
        port = http_port,
        address = "127.0.0.1:" .. http_port,
        base = "http://127.0.0.1:" .. http_port,
    }, Node)
    n.proc = M.spawn({ M.bin, "node", path },
                     { stdout = n.log_path,
                       stderr = n.stderr_path or "stdout" })
    n.pid = n.proc.pid
    return n
end

-- Starts a node and waits until GET /v1/health answers 200. Raises, with
-- the node's log, when it does not come up within opts.timeout (10 s).
function M.start(opts)
    assert(type(opts) == "table" and type(opts.entities) == "table",
           "start: opts.entities is required")
    local why
    for _ = 1, 3 do
        local n = launch(opts)
        nodes[#nodes + 1] = n
        local deadline = M.now() + (opts.timeout or 10)
        while true do
            if n.proc:poll() then
                why = format("node exited (code %s, signal %s):\n%s",
                             tostring(n.proc.code), tostring(n.proc.signal),
                             n:log())
                break
            end
            local status = n:http("GET", "/v1/health", nil,
                                  { max_time = 1 })
            if status == 200 then
                return n
            end
            if M.now() >= deadline then
                n:stop(1)
                error("node did not come up:\n" .. n:log(), 2)
            end
            M.sleep(0.01)
        end
        if not find(why, "cannot listen", 1, true) then
            break -- not a lost race for the port: do not retry
        end
    end
    error(why, 2)
end

-- The node's stdout and stderr so far.
function Node:log()
    return (M.read_file(self.log_path) or "")
        .. (self.stderr_path and M.read_file(self.stderr_path) or "")
end

-- The node's stderr alone (opts.stderr_apart), else nil.
function Node:stderr()
    return self.stderr_path and (M.read_file(self.stderr_path) or "")
end

function Node:alive()
    return not self.proc:poll()
end

-- Stops the node by PID: SIGTERM, SIGKILL after `grace` seconds (5).
-- Returns the exit code (nil when it died by a signal) and the signal.
function Node:stop(grace)
    self.proc:terminate(grace)
    return self.proc.code, self.proc.signal
end

-- Signals of a fault: a process that ends by one of these crashed
-- (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV).
local CRASH_SIGNALS = { [4] = true, [6] = true, [7] = true, [8] = true,
                        [11] = true }

-- Stops every node this spec file started, and every other process it
-- started that still runs, by PID: SIGTERM to all of them at once, then
-- SIGKILL to those still running after `grace` seconds (5). Removes the
-- temp dirs. Returns those that had crashed, as "pid N (signal S)", and
-- the sanitizer reports found in the temp dirs' files before they went
-- (node_proc.sanitizer_reports: a build of .ci/sanitize).
function M.stop_all(grace)
    local procs, seen = {}, {}
    for _, n in ipairs(nodes) do
        if not seen[n.proc] then
            seen[n.proc] = true
            procs[#procs + 1] = n.proc
        end
    end
    for _, pid in ipairs(M.running()) do
        if not seen[children[pid]] then
            seen[children[pid]] = true
            procs[#procs + 1] = children[pid]
        end
    end
    for _, p in ipairs(procs) do
        if p:poll() then
            p.done = true
        else
            p:send_signal(SIGCONT) -- a stopped process cannot handle TERM
            p:send_signal(SIGTERM)
        end
    end
    local deadline = M.now() + (grace or 5)
    for _, p in ipairs(procs) do
        if not p.done and not p:wait(math.max(deadline - M.now(), 0)) then
            p:send_signal(SIGKILL)
            p:wait(5)
            p.killed = true
        end
    end
    nodes = {}
    local reports = node_proc.sanitizer_reports()
    M.cleanup()
    local crashed = {}
    for _, p in ipairs(procs) do
        if CRASH_SIGNALS[p.signal] then
            crashed[#crashed + 1] = format("pid %d (signal %d)", p.pid,
                                           p.signal)
        end
    end
    return crashed, reports
end

-- For a spec file's teardown: stops every process it started (stop_all)
-- and raises, naming them, when one of them outlived that or had crashed
-- (a signal of a fault, whenever it came: a crash at any stop fails), or
-- when a sanitizer report was written into a node's log.
function M.stop_all_checked(grace)
    local crashed, reports = M.stop_all(grace)
    if #reports > 0 then
        error("sanitizer reports" .. (#crashed > 0 and " (crashed: "
              .. concat(crashed, ", ") .. ")" or "") .. ":\n"
              .. concat(reports, "\n"), 2)
    end
    if #crashed > 0 then
        error("processes crashed: " .. concat(crashed, ", "), 2)
    end
    local left = M.leaks()
    if #left > 0 then
        error("processes left running: " .. concat(left, ", "), 2)
    end
end

-- M.request to this node (its port on 127.0.0.1, or its host:port when
-- it has another host).
function Node:http(method, path, body, opts)
    local to = self.port
    if self.host and self.host ~= "127.0.0.1" then
        to = self.address
    end
    return M.request(to, method, path, body, opts)
end

function Node:tell(t, id, msg)
    return self:http("POST", entity_path(t, id, "tell"), msg)
end

-- timeout: seconds, a number or a raw query value; nil for the default.
function Node:ask(t, id, msg, timeout)
    local q = timeout ~= nil and ("?timeout=" .. tostring(timeout)) or ""
    return self:http("POST", entity_path(t, id, "ask") .. q, msg)
end

-- Asks and returns the reply, raising unless the status is 200.
function Node:call(t, id, msg, timeout)
    local status, body, raw = self:ask(t, id, msg, timeout)
    if status ~= 200 then
        error(format("ask %s/%s %s: %s %s", t, id, cjson.encode(msg),
                     tostring(status), raw), 2)
    end
    return body
end

function Node:stop_entity(t, id)
    return self:http("POST", entity_path(t, id, "stop"))
end

-- GET /v1/stats, decoded.
function Node:stats()
    local status, body, raw = self:http("GET", "/v1/stats")
    if status ~= 200 then
        error("GET /v1/stats: " .. tostring(status) .. " " .. raw, 2)
    end
    return body
end

-- Waits until the node has handled everything accepted (pending == 0 and
-- delivered >= `delivered` when given). Returns the stats.
function Node:settle(delivered, timeout)
    return M.wait_until(function()
        local s = self:stats()
        if s.pending == 0 and (not delivered or s.delivered >= delivered) then
            return s
        end
        return nil, "pending " .. s.pending .. ", delivered " .. s.delivered
    end, timeout or 10, "the node to settle")
end

-- GET `path` on this node, decoded; raises unless the status is 200.
function Node:get_json(path)
    local status, body, raw = self:http("GET", path, nil, { max_time = 5 })
    if status ~= 200 or type(body) ~= "table" then
        error(format("%s GET %s: %s %s", self.name or self.address, path,
                     tostring(status), raw), 2)
    end
    return body
end

-- GET /v1/members: { self, leader (uids), converged, members = {{uid, name,
-- address, status, up_number, reachable, ...}} }.
function Node:members()
    return self:get_json("/v1/members")
end

-- GET /v1/allocations/{type}: { type, generation, shard_count, shards =
-- {{shard, owner (name) or JSON null, uid, generation}} }.
function Node:allocations(t)
    return self:get_json("/v1/allocations/" .. pct_encode(t))
end

-- GET /v1/entities/{type}/{id}/owner: { type, id, shard, owner, uid }.
function Node:owner(t, id)
    return self:get_json(entity_path(t, id, "owner"))
end

-- POST /v1/entities/{type}/{id}/activate; returns status, body, raw.
function Node:activate(t, id)
    return self:http("POST", entity_path(t, id, "activate"))
end

-- Waits (up to `timeout` s, 30) until node n, the coordinator, places a
-- shard of type t on the member named `name`: activates fresh ids of t
-- ("<prefix>1", "<prefix>2", ...) through n, each on a shard that has no
-- owner yet, until one lands there. A converged view is not enough: the
-- coordinator places shards on a member only once it has that member's
-- registration of its types, which can come after the view (when the
-- view request was lost, at its resend after view_timeout, 3 s); until
-- then every shard goes elsewhere. The probes slow down (0.05 s, then
-- doubling up to 0.5 s) so that a late registration does not use up
-- the type's shards; once no shard is left unowned, only a rebalance
-- move can put one there. `headers`: extra request headers (an API
-- token). Returns the ids it activated (a spec that counts entities
-- counts them).
function Node:wait_placed_on(t, name, timeout, prefix, headers)
    local ids, k = {}, 0
    prefix = prefix or "placed-"
    local opts = headers and { headers = headers } or nil
    local pause = 0.05
    local deadline = M.now() + (timeout or 30)
    while true do
        local free = false
        for _, s in ipairs(self:allocations(t).shards) do
            if s.owner == name then return ids end
            if s.owner == cjson.null then free = true end
        end
        if M.now() >= deadline then
            error(format("timed out after %gs waiting for a %s shard on %s "
                         .. "(%d ids activated)", timeout or 30, t, name,
                         #ids), 2)
        end
        -- the next id whose shard has no owner (one on an owned shard
        -- would tell nothing); its activation places that shard
        for _ = 1, free and 1000 or 0 do
            k = k + 1
            local id = prefix .. k
            local st, o, raw = self:http("GET", entity_path(t, id, "owner"),
                                         nil, opts)
            assert(st == 200, raw)
            if o.owner == cjson.null then
                ids[#ids + 1] = id
                st, _, raw = self:http("POST", entity_path(t, id,
                                                           "activate"),
                                       nil, opts)
                assert(st >= 200 and st < 300, raw)
                break
            end
        end
        M.sleep(pause)
        pause = math.min(pause * 2, 0.5)
    end
end

-- POST /v1/leave or /v1/down (`action`) with a member's address as the
-- JSON body, or a table encoded as the body ({ address = ..., force =
-- true }). `token`: the X-Moonshard-Token header; nil: the cluster's
-- admin token; false: no header. Returns status, body, raw.
function Node:admin(action, address, token)
    if token == nil then
        token = self.cluster and self.cluster.admin_token
    end
    local headers = token and { ["X-Moonshard-Token"] = token } or nil
    return self:http("POST", "/v1/" .. action, cjson.encode(address),
                     { headers = headers })
end

-- Sends signal `sig` (helpers.SIGSTOP, ...) to the node's process.
function Node:signal(sig)
    self.proc:send_signal(sig)
end

-- SIGKILL, and waits until the process is reaped.
function Node:kill()
    self.proc:send_signal(SIGKILL)
    assert(self.proc:wait(5), "SIGKILL did not end the node")
end

-- The member of a /v1/members answer named `name` (the live one when a
-- restarted node is listed twice), or nil.
function M.member(view, name)
    local found
    for _, m in ipairs(view.members) do
        if m.name == name and (not found or found.status ~= "up") then
            found = m
        end
    end
    return found
end

-- The name of the leader of a /v1/members answer, or nil.
function M.leader_name(view)
    for _, m in ipairs(view.members) do
        if m.uid == view.leader then
            return m.name
        end
    end
    return nil
end

-------------------------------------------------------------------------------
-- Clusters: several nodes of one config, each its own process
--
--     local c = helpers.cluster({ size = 4, entities = { ... } })
--     c:start({ "n1", "n2", "n3" })        -- n4 stays in the config only
--     c:wait_converged({ "n1", "n2", "n3" })
--     c:node("n2"):ask("Counter", "c1", { type = "get" })
--
-- Nodes are named n1..nK, each with its own listen (the member address,
-- node.listen) and HTTP port (node.port); the first node is the default
-- seed. The config sets `secret` and `admin_token` (helpers.SECRET and
-- helpers.ADMIN_TOKEN unless opts say otherwise). Each node runs as
-- `moonshard node CONFIG --name nK`; a node started again gets a new
-- process (a new incarnation) and a new log file. stop_all() stops them
-- all by PID.

M.SECRET = "spec-cluster-secret"
M.ADMIN_TOKEN = "spec-admin-token"

local Cluster = {}
Cluster.__index = Cluster

-- A node of cluster `c` named `name` on fresh ports (not started), on
-- `host` (an IPv4 address; nil: 127.0.0.1) and started with the argv
-- `prefix` before the moonshard command (nil: none), say { "ip", "netns",
-- "exec", NAME }: a prefix must exec the command, so that the PID the
-- helper keeps (and signals, and stops) is the node's.
local function cluster_node(c, name, host, prefix)
    local lp, hp = M.free_port(), M.free_port()
    host = host or "127.0.0.1"
    return setmetatable({
        cluster = c,
        name = name,
        dir = c.dir,
        config = c.config,
        host = host,
        prefix = prefix,
        listen_port = lp,
        listen = host .. ":" .. lp,
        port = hp,
        address = host .. ":" .. hp,
        base = "http://" .. host .. ":" .. hp,
        runs = 0,
    }, Node)
end

-- Writes a config of cluster `c` into its dir as `file`, with `changes`
-- applied to its top-level fields (say { secret = "other" }) and the
-- nodes `extra` (from c:new_node) appended to its node list. Returns the
-- path.
function Cluster:write_config(file, changes, extra)
    local opts = self.opts
    local t = {
        cluster = opts.cluster or "spec",
        secret = self.secret,
        admin_token = self.admin_token,
        seeds = opts.seeds,
        entities = opts.entities,
        limits = opts.limits,
        nodes = {},
    }
    for k, v in pairs(with_defaults(opts.settings)) do
        t[k] = v
    end
    for k, v in pairs(changes or {}) do
        t[k] = v
    end
    local list = {}
    for _, n in ipairs(self.nodes) do
        list[#list + 1] = n
    end
    for _, n in ipairs(extra or {}) do
        list[#list + 1] = n
    end
    for i, n in ipairs(list) do
        t.nodes[i] = { name = n.name, listen = n.listen, http = n.address,
                       roles = opts.roles and opts.roles[n.name] or nil }
        for k, v in pairs(opts.node_fields and opts.node_fields[n.name]
                          or {}) do
            t.nodes[i][k] = v
        end
    end
    local path = self.dir .. "/" .. file
    M.write_file(path, "-- generated by spec/helpers/node.lua\n"
        .. format("package.path = %q .. package.path\n",
                  M.fixtures .. "/?.lua;")
        .. "return " .. literal(t) .. "\n")
    return path
end

-- A cluster config for `opts` (nothing started). opts.entities
-- (required), opts.size (3), opts.secret, opts.admin_token (false: none),
-- opts.cluster, opts.seeds, opts.limits, opts.roles = { n1 = {...} },
-- opts.node_fields = { n1 = { weight = 3, version = "2.0" } } (more fields
-- of a node's entry),
-- opts.settings = { handoff_timeout = 2, ... } (other top-level fields),
-- where a table { __lua = "expression" } is written as that expression,
-- opts.watch = true: nodes run with --watch,
-- opts.files = { ["name.lua"] = text } written beside the config,
-- opts.hosts = { "10.0.0.11", ... }: node i listens (member and HTTP
-- address) on hosts[i] instead of 127.0.0.1, opts.prefixes = { argv, ...
-- }: node i runs as prefixes[i] .. the moonshard command (see
-- cluster_node; nemesis/net.lua puts each node in a network namespace).
function M.cluster(opts)
    assert(type(opts) == "table" and type(opts.entities) == "table",
           "cluster: opts.entities is required")
    local c = setmetatable({
        opts = opts,
        dir = M.tmpdir(),
        nodes = {},
        by_name = {},
        secret = opts.secret or M.SECRET,
        admin_token = opts.admin_token == nil and M.ADMIN_TOKEN
            or opts.admin_token or nil,
    }, Cluster)
    for name, text in pairs(opts.files or {}) do
        M.write_file(c.dir .. "/" .. name, text)
    end
    c.config = c.dir .. "/cluster.lua"
    for i = 1, opts.size or 3 do
        local n = cluster_node(c, "n" .. i, opts.hosts and opts.hosts[i],
                               opts.prefixes and opts.prefixes[i])
        c.nodes[i] = n
        c.by_name[n.name] = n
    end
    c:write_config("cluster.lua")
    return c
end

-- M.cluster(opts) with every node started and the view converged.
function M.cluster_up(opts, timeout)
    local c = M.cluster(opts)
    c:start()
    c:wait_converged(nil, timeout or 10)
    return c
end

-- A node that is not in the cluster's config, on fresh ports: give it a
-- config of its own (c:write_config(file, changes, { node })) in
-- node.config before node:launch().
function Cluster:new_node(name)
    return cluster_node(self, name)
end

-- A node by name ("n2") or index (2).
function Cluster:node(which)
    local n = type(which) == "number" and self.nodes[which]
        or self.by_name[which]
    return assert(n, "no node " .. tostring(which))
end

-- Nodes for a list of names, indexes or nodes; nil: every node whose
-- process runs.
function Cluster:select(list)
    local out = {}
    if list == nil then
        for _, n in ipairs(self.nodes) do
            if n.proc and n:alive() then
                out[#out + 1] = n
            end
        end
        return out
    end
    for i, x in ipairs(list) do
        out[i] = type(x) == "table" and x or self:node(x)
    end
    return out
end

-- Starts the node's process (again: a new incarnation), without waiting.
function Node:launch()
    self.runs = self.runs + 1
    self.log_path = format("%s/%s.%d.log", self.dir, self.name, self.runs)
    local argv = {}
    for _, a in ipairs(self.prefix or {}) do
        argv[#argv + 1] = a
    end
    for _, a in ipairs({ M.bin, "node", self.config, "--name",
                         self.name }) do
        argv[#argv + 1] = a
    end
    if self.cluster and self.cluster.opts.watch then
        argv[#argv + 1] = "--watch" -- hot reload of changed modules
    end
    self.proc = M.spawn(argv, { stdout = self.log_path, stderr = "stdout" })
    self.pid = self.proc.pid
    nodes[#nodes + 1] = self
    return self
end

-- Waits until the node answers GET /v1/health; raises with its log when
-- it exits or `timeout` (10) seconds pass first.
function Node:wait_healthy(timeout)
    local deadline = M.now() + (timeout or 10)
    while true do
        if self.proc:poll() then
            error(format("node %s exited (code %s, signal %s):\n%s",
                         self.name, tostring(self.proc.code),
                         tostring(self.proc.signal), self:log()), 2)
        end
        if self:http("GET", "/v1/health", nil, { max_time = 1 }) == 200 then
            return self
        end
        if M.now() >= deadline then
            error("node " .. self.name .. " did not come up:\n" .. self:log(),
                  2)
        end
        M.sleep(0.01)
    end
end

-- Starts the nodes `list` (names or indexes; nil: all) and waits until
-- each answers HTTP (not until it is Up: see wait_converged). Returns
-- the nodes.
function Cluster:start(list, timeout)
    if list == nil then
        list = {}
        for i = 1, #self.nodes do
            list[i] = i
        end
    end
    local started_nodes = self:select(list)
    for _, n in ipairs(started_nodes) do
        n:launch()
    end
    for _, n in ipairs(started_nodes) do
        n:wait_healthy(timeout)
    end
    return started_nodes
end

-- Waits until every node of `list` (see select; nil: every running
-- node) answers /v1/members converged, listing exactly the members of
-- `list`, all Up and reachable, under one leader. Returns { [name] =
-- members answer }.
function Cluster:wait_converged(list, timeout)
    local sel = self:select(list)
    local want = {}
    for i, n in ipairs(sel) do
        want[i] = n.name
    end
    sort(want)
    want = concat(want, ",")
    return M.wait_until(function()
        local views, leader = {}, nil
        for _, n in ipairs(sel) do
            local status, view = n:http("GET", "/v1/members", nil,
                                        { max_time = 2 })
            if status ~= 200 or type(view) ~= "table" then
                return nil, n.name .. ": GET /v1/members " .. status
            end
            if not view.converged then
                return nil, n.name .. " is not converged"
            end
            local got = {}
            for _, m in ipairs(view.members) do
                if m.status ~= "up" or m.reachable == false then
                    return nil, format("%s sees %s %s%s", n.name, m.name,
                                       m.status, m.reachable == false
                                           and " (unreachable)" or "")
                end
                got[#got + 1] = m.name
            end
            sort(got)
            got = concat(got, ",")
            if got ~= want then
                return nil, n.name .. " lists " .. got
            end
            if leader and view.leader ~= leader then
                return nil, "the nodes see different leaders"
            end
            leader = view.leader
            views[n.name] = view
        end
        return views
    end, timeout or 10, "members " .. want .. " to converge", 0.05)
end

return M

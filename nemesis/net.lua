-- nemesis/net.lua: the network of a nemesis run (nemesis/run, netns mode;
-- nemesis/README.md, "The network").
--
--   local net = require "nemesis.net"
--   local why = net.missing()           -- nil, or what is missing (root,
--                                       -- ip, nft)
--   local n = net.new(5)                -- names from this process's PID
--   n:setup()                           -- raises; a guard process removes
--                                       -- it all if this process dies
--   n.hosts[i], n.gateway, n.cidr, n.prefixes[i]
--   n:cut(net.rules(kind, spec, n.hosts, n.gateway, pg_port))
--   n:heal()                            -- flushes every rule
--   n:teardown()                        -- idempotent; nil or the failures
--   net.cleanup()                       -- leftovers of runs that are gone
--
-- Layout: one network namespace per node, `msn<PID>-<i>`, with `lo` up
-- and an `eth0` whose peer `msv<PID>-<i>` (root namespace) is a port of
-- the bridge `msb<PID>`. The bridge has 10.213.X.1/24 (X from the PID,
-- the first /24 of 10.213.0.0/16 from there that no address or route of
-- this host uses); node i has 10.213.X.(10+i). The harness, the clients
-- and PostgreSQL stay in the root namespace and reach the nodes through
-- the bridge; nothing is routed out of 10.213.X.0/24. Each namespace has
-- a table `inet nemesis` with an input and an output chain (policy
-- accept) where a partition adds drop rules by peer address; a heal
-- flushes them. Removing a namespace removes its table and its veth pair.
--
-- Names are this harness's alone (prefixes msn, msv, msb and a PID), so
-- two runs coexist and net.cleanup() removes only names whose PID no
-- longer runs.

local M = {}

local format, concat = string.format, table.concat

M.NS, M.VETH, M.BRIDGE = "msn", "msv", "msb"
M.TABLE = "nemesis"
M.MAX_NODES = 9                 -- hosts .11 .. .19

local function sh_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- the output (stdout and stderr) of a shell command and whether it
-- exited 0
local function sh(cmd)
    local f = io.popen(cmd .. " 2>&1; echo \"ms-rc=$?\"", "r")
    local out = f:read("*a")
    f:close()
    local rc = out:match("ms%-rc=(%d+)\n$")
    return (out:gsub("ms%-rc=%d+\n$", "")), rc == "0"
end
M.sh = sh

-- runs `cmd`; raises with its output unless it exits 0
local function must(cmd)
    local out, ok = sh(cmd)
    if not ok then
        error(format("nemesis/net: `%s` failed: %s", cmd, out), 2)
    end
    return out
end

function M.pid()
    local f = assert(io.open("/proc/self/stat", "r"))
    local line = f:read("*l")
    f:close()
    -- /proc/self is the reader: the shell is not involved
    return tonumber(line:match("^(%d+)"))
end

local function pid_alive(pid)
    local f = io.open(format("/proc/%d/stat", pid), "r")
    if not f then return false end
    local stat = f:read("*a") or ""
    f:close()
    return stat:match("^%d+ %b() (%a)") ~= "Z"
end

-------------------------------------------------------------------------------
-- Prerequisites

-- nil when this process can build the network; else a message naming
-- what is missing (we are not root, no `ip`, no `nft`, or the kernel
-- refuses a namespace).
function M.missing()
    local id = sh("id -u")
    if id:match("^%s*(%d+)") ~= "0" then
        return "the netns mode needs root (network namespaces, nftables); "
            .. "run as root, or use --loopback (no partitions)"
    end
    for _, tool in ipairs({ "ip", "nft" }) do
        local _, ok = sh("command -v " .. tool)
        if not ok then
            return format("the netns mode needs `%s` (Debian: %s); or use "
                .. "--loopback (no partitions)", tool,
                tool == "ip" and "iproute2" or "nftables")
        end
    end
    return nil
end

-------------------------------------------------------------------------------
-- Partition rules (pure: the unit spec checks them without root)

local function others(hosts, except)
    local list = {}
    for i, h in ipairs(hosts) do
        if not except[i] then list[#list + 1] = h end
    end
    return list
end

local function addr_set(list)
    return "{ " .. concat(list, ", ") .. " }"
end

-- the rules that cut node `i` off from the addresses `peers`, both ways
local function cut_both(rules, i, peers)
    if #peers == 0 then return end
    rules[i] = rules[i] or {}
    local r = rules[i]
    r[#r + 1] = "input ip saddr " .. addr_set(peers) .. " drop"
    r[#r + 1] = "output ip daddr " .. addr_set(peers) .. " drop"
end

-- The nft rules of a partition, per node index: { [i] = { "input ...
-- drop", "output ... drop" } } (chain and rule of table inet nemesis).
-- `hosts`: the nodes' addresses by index; `gateway`: the bridge's
-- (PostgreSQL and the clients); `pg_port`: PostgreSQL's port. Kinds and
-- their spec:
--   isolate { node = i }: i exchanges nothing with any other node
--   split { a = {i...}, b = {j...} }: no traffic between the sides
--   oneway { from = j, to = i }: i receives nothing from j (j still
--     receives from i; TCP, which needs both ways, then fails both ways,
--     but datagrams and a half-open connection see the difference)
--   bridge { a = {...}, mid = k, b = {...} }: the sides a and b cannot
--     talk; both still talk with k
--   pg_cut { node = i }: i exchanges nothing with PostgreSQL's port
-- Traffic from and to the gateway (the clients, the harness) is never
-- dropped, except PostgreSQL's port by pg_cut. Raises on a bad spec.
function M.rules(kind, spec, hosts, gateway, pg_port)
    local n = #hosts
    local function index(i)
        if type(i) ~= "number" or i < 1 or i > n or i % 1 ~= 0 then
            error(format("nemesis/net: %s: no node %s", kind, tostring(i)), 3)
        end
        return i
    end
    local rules = {}
    if kind == "isolate" then
        local i = index(spec.node)
        cut_both(rules, i, others(hosts, { [i] = true }))
    elseif kind == "split" or kind == "bridge" then
        local a, b = spec.a or {}, spec.b or {}
        if #a == 0 or #b == 0 then
            error("nemesis/net: " .. kind .. ": both sides need a node", 2)
        end
        if kind == "bridge" then index(spec.mid) end
        local seen = { [spec.mid or 0] = true }
        local ha, hb = {}, {}
        for side, list in pairs({ [ha] = a, [hb] = b }) do
            for _, i in ipairs(list) do
                if seen[index(i)] then
                    error(format("nemesis/net: %s: n%d on two sides",
                                 kind, i), 2)
                end
                seen[i] = true
                side[#side + 1] = hosts[i]
            end
        end
        for _, i in ipairs(a) do cut_both(rules, i, hb) end
        for _, j in ipairs(b) do cut_both(rules, j, ha) end
    elseif kind == "oneway" then
        local from, to = index(spec.from), index(spec.to)
        if from == to then
            error("nemesis/net: oneway: from and to are one node", 2)
        end
        rules[to] = { "input ip saddr " .. hosts[from] .. " drop" }
    elseif kind == "pg_cut" then
        local i = index(spec.node)
        assert(gateway and pg_port, "nemesis/net: pg_cut needs the "
               .. "gateway and PostgreSQL's port")
        rules[i] = {
            format("output ip daddr %s tcp dport %d drop", gateway, pg_port),
            format("input ip saddr %s tcp sport %d drop", gateway, pg_port),
        }
    else
        error("nemesis/net: no partition kind " .. tostring(kind), 2)
    end
    return rules
end

-------------------------------------------------------------------------------
-- A run's network

local Net = {}
Net.__index = Net

-- the names of run `id`'s objects for `count` nodes
function M.names(id, count)
    local t = { bridge = M.BRIDGE .. id, ns = {}, veth = {} }
    for i = 1, count do
        t.ns[i] = format("%s%d-%d", M.NS, id, i)
        t.veth[i] = format("%s%d-%d", M.VETH, id, i)
    end
    return t
end

-- a 10.213.X.0/24 no address or route of this host touches, X from `id`
local function free_subnet(id)
    local used = sh("ip -4 -o addr show; ip -4 route show table all")
    for k = 0, 253 do
        local x = (id + k) % 254 + 1
        local prefix = format("10.213.%d.", x)
        if not used:find(prefix, 1, true)
                and not used:find("10.213.0.0/16", 1, true) then
            return x
        end
    end
    error("nemesis/net: no free /24 in 10.213.0.0/16")
end

-- A run's network for `count` nodes (1..M.MAX_NODES), named after `id`
-- (default: this process's PID). Nothing is made before setup().
function M.new(count, id)
    assert(count >= 1 and count <= M.MAX_NODES, "nemesis/net: 1.."
           .. M.MAX_NODES .. " nodes")
    id = id or M.pid()
    local self = setmetatable({ id = id, count = count,
                                names = M.names(id, count),
                                made = {}, cut_ns = {} }, Net)
    self.prefixes = {}
    for i = 1, count do
        self.prefixes[i] = { "ip", "netns", "exec", self.names.ns[i] }
    end
    return self
end

-- Builds the bridge, the namespaces and their tables; raises (after
-- removing what it made) when a step fails. Starts a guard process that
-- runs net.cleanup() once this process is gone (SIGKILL, a crash).
function Net:setup(root)
    local x = free_subnet(self.id)
    self.subnet = format("10.213.%d", x)
    self.cidr = self.subnet .. ".0/24"
    self.gateway = self.subnet .. ".1"
    self.hosts = {}
    for i = 1, self.count do
        self.hosts[i] = format("%s.%d", self.subnet, 10 + i)
    end
    -- the guard first: a crash while we build leaves nothing either
    self:guard(root or ".")
    local ok, err = pcall(function()
        local b = self.names.bridge
        must(format("ip link add %s type bridge", b))
        self.made.bridge = true
        must(format("ip addr add %s/24 dev %s && ip link set %s up",
                    self.gateway, b, b))
        for i = 1, self.count do
            local ns, veth = self.names.ns[i], self.names.veth[i]
            must("ip netns add " .. ns)
            self.made[ns] = true
            must(format("ip link add %s type veth peer name eth0 netns %s",
                        veth, ns))
            must(format("ip link set %s master %s up", veth, b))
            must(format("ip -n %s addr add %s/24 dev eth0", ns,
                        self.hosts[i]))
            must(format("ip -n %s link set eth0 up && ip -n %s link set lo up",
                        ns, ns))
            must(format("printf '%%s\\n' %s | ip netns exec %s nft -f -",
                sh_quote(format("table inet %s {\n"
                    .. "  chain input { type filter hook input priority 0; "
                    .. "policy accept; }\n"
                    .. "  chain output { type filter hook output priority 0; "
                    .. "policy accept; }\n}", M.TABLE)), ns))
        end
    end)
    if not ok then
        self:teardown()
        error(err, 0)
    end
    return self
end

-- a process that removes this run's network once this process is gone
function Net:guard(root)
    local me = M.pid()
    local cmd = format("while kill -0 %d 2>/dev/null; do sleep 1; done; "
        .. "exec luajit %s --cleanup-net", me, sh_quote(root
        .. "/nemesis/run"))
    local out = sh(format("setsid sh -c %s </dev/null >/dev/null 2>&1 & "
                          .. "echo $!", sh_quote(cmd)))
    self.guard_pid = tonumber(out:match("(%d+)"))
end

-- Applies `rules` (M.rules) in the namespaces, in one nft transaction
-- each; raises when nft refuses.
function Net:cut(rules)
    for i, list in pairs(rules) do
        local lines = {}
        for _, r in ipairs(list) do
            local chain, rest = r:match("^(%a+) (.*)$")
            lines[#lines + 1] = format("add rule inet %s %s %s", M.TABLE,
                                       chain, rest)
        end
        local ns = self.names.ns[i]
        self.cut_ns[ns] = true
        must(format("printf '%%s\\n' %s | ip netns exec %s nft -f -",
                    sh_quote(concat(lines, "\n")), ns))
    end
end

-- Removes every rule a cut added (the tables and chains stay).
function Net:heal()
    for ns in pairs(self.cut_ns) do
        must(format("ip netns exec %s nft flush table inet %s", ns, M.TABLE))
        self.cut_ns[ns] = nil
    end
end

-- The rules in force in node i's namespace (nft's listing).
function Net:ruleset(i)
    return (sh(format("ip netns exec %s nft list table inet %s",
                      self.names.ns[i], M.TABLE)))
end

-- Removes the namespaces (with their tables and veth pairs) and the
-- bridge; the processes still in a namespace are killed by PID first
-- (the harness stops its nodes before; this is for a crashed run).
-- Idempotent. Returns nil, or a list of what could not be removed.
function Net:teardown()
    local failed = {}
    for i = 1, self.count do
        local ns = self.names.ns[i]
        if self.made[ns] then
            local pids = sh("ip netns pids " .. ns)
            for pid in pids:gmatch("%d+") do
                sh("kill -KILL " .. pid)
            end
            local out, ok = sh("ip netns del " .. ns)
            if ok then
                self.made[ns] = nil
            else
                failed[#failed + 1] = ns .. ": " .. out
            end
        end
    end
    if self.made.bridge then
        local out, ok = sh("ip link del " .. self.names.bridge)
        if ok then
            self.made.bridge = nil
        else
            failed[#failed + 1] = self.names.bridge .. ": " .. out
        end
    end
    if self.guard_pid then
        sh("kill " .. self.guard_pid)
        self.guard_pid = nil
    end
    return #failed > 0 and failed or nil
end

-------------------------------------------------------------------------------
-- Leftovers

-- What exists now of this harness's names: { ns = {...}, links = {...} },
-- each { name =, id = PID of the run }.
function M.existing()
    local found = { ns = {}, links = {} }
    for name in sh("ip netns list"):gmatch("(%S+)[^\n]*") do
        local id = name:match("^" .. M.NS .. "(%d+)%-%d+$")
        if id then found.ns[#found.ns + 1] = { name = name, id = tonumber(id) } end
    end
    for name in sh("ip -o link show"):gmatch("%d+: ([^:@%s]+)") do
        local id = name:match("^" .. M.BRIDGE .. "(%d+)$")
            or name:match("^" .. M.VETH .. "(%d+)%-%d+$")
        if id then
            found.links[#found.links + 1] = { name = name, id = tonumber(id) }
        end
    end
    return found
end

-- Removes the namespaces, veths and bridges of runs whose PID no longer
-- runs (never a live run's). Returns the names removed and the failures.
function M.cleanup()
    local removed, failed = {}, {}
    local found = M.existing()
    for _, e in ipairs(found.ns) do
        if not pid_alive(e.id) then
            for pid in sh("ip netns pids " .. e.name):gmatch("%d+") do
                sh("kill -KILL " .. pid)
            end
            local out, ok = sh("ip netns del " .. e.name)
            if ok then removed[#removed + 1] = e.name
            else failed[#failed + 1] = e.name .. ": " .. out end
        end
    end
    for _, e in ipairs(M.existing().links) do
        if not pid_alive(e.id) then
            local out, ok = sh("ip link del " .. e.name)
            if ok then removed[#removed + 1] = e.name
            else failed[#failed + 1] = e.name .. ": " .. out end
        end
    end
    return removed, failed
end

-------------------------------------------------------------------------------
-- SIGTERM as SIGINT

-- Makes SIGTERM do what SIGINT does in the luajit interpreter (a Lua
-- error "interrupted!" at the next instruction, so the harness's xpcall
-- runs its cleanup). A no-op when SIGINT has no handler of the
-- interpreter's (not run by luajit's main).
function M.trap_term()
    local ffi = require "ffi"
    if not pcall(ffi.typeof, "struct ms_nemesis_sig") then
        ffi.cdef [[
            struct ms_nemesis_sig { int unused; };
            typedef void (*ms_nemesis_handler)(int);
            ms_nemesis_handler signal(int sig, ms_nemesis_handler h);
        ]]
    end
    local SIGINT, SIGTERM = 2, 15
    local ign = ffi.cast("ms_nemesis_handler", 1)
    local prev = ffi.C.signal(SIGINT, ign)
    ffi.C.signal(SIGINT, prev)
    local addr = tonumber(ffi.cast("intptr_t", prev))
    if addr > 1 then -- neither SIG_DFL (0) nor SIG_IGN (1)
        ffi.C.signal(SIGTERM, prev)
        return true
    end
    return false
end

return M

-- moonshard.config: load and validate a cluster config script.
--
-- A config script is a Lua file that returns a table (see DESIGN.md §3 and
-- examples/). `M.load(path)` runs it, checks every field against the schema
-- below and returns a normalized copy with every default filled in, or
-- `nil, err` where `err` is one line:
--
--     FILE:LINE: FIELD.PATH: reason (got VALUE)
--
-- Unknown fields are errors, so a typo never silently falls back to a
-- default. LINE comes from the script's source text: the field's key is
-- looked up inside the table constructor of its parent (a small Lua lexer
-- that skips strings and comments), so `entities.Counter.module` points into
-- the `Counter = { ... }` block, not at some other entity's `module`. When
-- the script does not end in `return { ... }` (say it builds the table in
-- locals), a plain text search is used instead: the first line, at or after
-- the parent key's line, holding the key as a whole word followed by `=`.
-- Either way the fallback is the parent's line, then line 1.

local type = type
local ipairs = ipairs
local next = next
local error = error
local pcall = pcall
local tostring = tostring
local setmetatable = setmetatable
local getmetatable = getmetatable
local setfenv = setfenv
local loadfile = loadfile
local floor = math.floor
local format = string.format
local find = string.find
local match = string.match
local sub = string.sub
local byte = string.byte
local io_open = io.open
local G = _G
local package = package

local strategy = require "moonshard.strategy"
local partition = require "moonshard.partition"

local M = {}

local MAX_IDLE_SECONDS = 1e9

local source_lines = require "moonshard.config_source"
local locate, locate_return = source_lines.locate, source_lines.locate_return
local fields = require "moonshard.config_fields"
local Failure, Concealed = fields.Failure, fields.Concealed
local show, path_string = fields.show, fields.path_string
local fail, child = fields.fail, fields.child
local is_integer, is_list = fields.is_integer, fields.is_list
local sorted_keys = fields.sorted_keys
local check_known, check_table = fields.check_known, fields.check_table
local string_field, integer_field = fields.string_field, fields.integer_field
local limit_field = fields.limit_field
local seconds_field, address_field = fields.seconds_field, fields.address_field

M.parse_address = fields.parse_address
local INT_MAX = fields.INT_MAX

local NAME_PATTERN = "^[%w_%.%-]+$"
local NAME_REASON = "must contain only letters, digits, '_', '.' and '-'"
local TYPE_PATTERN = "^[%a][%w_]*$"
local MODULE_PATTERN = "^[%w_%-]+[%w_%-%.]*$"

local TOP_FIELDS = {
    cluster = true, secret = true, seeds = true, nodes = true,
    entities = true, limits = true, gc_step_kb = true, admin_token = true,
    admin_remote = true, handoff_timeout = true, rebalance_interval = true,
    stuck_handler_ms = true, stuck_handler_exit_ms = true, database = true,
    operation_retention = true, database_connections = true,
    heartbeat_interval = true, unreachable_after = true,
    gossip_interval = true, gossip_fanout = true, seed_timeout = true,
    lone_leave_timeout = true, log_format = true, on_member_event = true,
    tls = true, gateway_tls = true, api_token = true,
    max_active_entities = true, gc_headroom_mb = true,
}
local NODE_FIELDS = {
    name = true, listen = true, http = true, roles = true, weight = true,
    version = true, tls = true, gateway_tls = true,
    max_active_entities = true,
}
-- a cluster-wide field in a node's entry (gc_headroom_mb, say) is not a
-- typo: say where it goes
local TOP_ONLY = {}
for k in pairs(TOP_FIELDS) do
    if not NODE_FIELDS[k] then
        TOP_ONLY[k] = "set only at the top level, for every node"
    end
end
local TLS_FIELDS = { ca = true, cert = true, key = true }
-- The longest path of a TLS file, once resolved (the node keeps each in
-- a buffer of MAX_TLS_PATH + 1 bytes: runtime/core/config.h).
local MAX_TLS_PATH = 511
local NODE_TLS_FIELDS = { cert = true, key = true }
local ENTITY_FIELDS = {
    module = true, shard_count = true, idle_timeout = true, on_error = true,
    max_pending = true, slow_handler_ms = true, allocation = true,
    rebalance = true, partitioner = true, persistence = true, remember = true,
    lease_duration = true, lease_renew_interval = true, lease_window = true,
    snapshot_every = true, delete_events_on_snapshot = true,
}
local LIMIT_FIELDS = {
    max_message_bytes = true, json_max_depth = true, http_timeout = true,
    http_connections = true,
}

local MAX_SEEDS = 16 -- MS_MB_MAX_SEEDS (runtime/core/membership.h)

local function check_seeds(v, path)
    if v == nil then
        return nil
    end
    if not is_list(v) or #v == 0 or #v > MAX_SEEDS then
        fail(path, "must be a list of 1 to " .. MAX_SEEDS .. " \"host:port\""
             .. " strings (leave it out to use the nodes listed)", v)
    end
    local seeds = {}
    for i, s in ipairs(v) do
        seeds[i] = address_field(s, child(path, i), true)
    end
    return seeds
end

local function check_roles(v, path)
    if v == nil then
        return {}
    end
    if not is_list(v) then
        fail(path, "must be a list of role names", v)
    end
    local roles, seen = {}, {}
    for i, r in ipairs(v) do
        local p = child(path, i)
        if type(r) ~= "string" or r == "" then
            fail(p, "must be a non-empty string", r)
        end
        if seen[r] then
            fail(p, "duplicate role", r)
        end
        seen[r] = true
        roles[i] = r
    end
    return roles
end

-- A node's weight (weighted_least_loaded gives it shards in proportion)
-- and its application version (the strategies prefer the newest during a
-- rolling upgrade; default: the binary's). The membership gossips both;
-- a version is what runtime/core/membership.h allows in a gossiped
-- string: at most MS_MB_MAX_VERSION (32) bytes of printable ASCII without
-- space, '"', '\\' and ','.
M.MAX_WEIGHT = 1000
M.MAX_VERSION = 32
-- the largest gc_headroom_mb: 1 GB (runtime/lua/vm.c keeps the collector's
-- threshold within what a LuaJIT without GC64 can count)
M.MAX_GC_HEADROOM_MB = 1024
local VERSION_PATTERN = "^[%w%.%-%+_~:/@#%%]+$"
local VERSION_REASON = "must contain only letters, digits and . - + _ ~ :"
    .. " / @ # %"

local function check_nodes(v, path)
    if v == nil then
        fail(path, "required", v)
    end
    if not is_list(v) or #v == 0 then
        fail(path, "must be a non-empty list of node tables", v)
    end
    local nodes = {}
    local names, addresses = {}, {}
    for i, raw in ipairs(v) do
        local p = child(path, i)
        check_table(raw, p)
        check_known(raw, p, NODE_FIELDS, TOP_ONLY)
        local name = string_field(raw, "name", p, {
            required = true, pattern = NAME_PATTERN, pattern_reason = NAME_REASON,
        })
        if names[name] then
            fail(child(p, "name"), "duplicate node name, also used by "
                 .. path_string(names[name]), name)
        end
        names[name] = p
        local node = { name = name }
        for _, key in ipairs({ "listen", "http" }) do
            local ap = child(p, key)
            local addr = address_field(raw[key], ap, true)
            if addresses[addr] then
                fail(ap, "duplicate address, also used by "
                     .. path_string(addresses[addr]), addr)
            end
            addresses[addr] = ap
            node[key] = addr
        end
        node.roles = check_roles(raw.roles, child(p, "roles"))
        node.weight = integer_field(raw, "weight", p, 1, M.MAX_WEIGHT, 1)
        -- this node's own active-entity limit (false: none), in place of
        -- the top-level one
        node.max_active_entities = limit_field(raw, "max_active_entities",
                                               p)
        node.version = string_field(raw, "version", p, {
            pattern = VERSION_PATTERN, pattern_reason = VERSION_REASON,
            max_len = M.MAX_VERSION,
        })
        -- the node's own certificate and key (check_tls)
        for _, key in ipairs({ "tls", "gateway_tls" }) do
            if raw[key] ~= nil then
                local tp = child(p, key)
                check_table(raw[key], tp)
                check_known(raw[key], tp, NODE_TLS_FIELDS)
                node[key] = {
                    cert = string_field(raw[key], "cert", tp,
                                        { max_len = MAX_TLS_PATH }),
                    key = string_field(raw[key], "key", tp,
                                       { max_len = MAX_TLS_PATH }),
                }
            end
        end
        nodes[i] = node
    end
    return nodes
end

-- An entity's `allocation` (a strategy, default least_loaded) and
-- `rebalance` (nil, an unbound policy or a strategy), combined as
-- moonshard.strategy.bind describes. Sets e.allocation and e.rebalance (the
-- objects the coordinator calls: allocate on the first, rebalance on the
-- second) and their ids, which every node must agree on.
local function check_strategies(raw, path, e)
    local alloc = raw.allocation
    local ap = child(path, "allocation")
    if alloc == nil then
        alloc = strategy.least_loaded()
    elseif strategy.is_policy(alloc) then
        fail(ap, "is a rebalance policy without an inner strategy: set it as"
             .. " 'rebalance', or give it one, as in"
             .. " strategy.no_rebalance(strategy.least_loaded())", alloc)
    elseif not strategy.is_strategy(alloc) then
        fail(ap, "must be a strategy (a table with an 'id' string and"
             .. " allocate and rebalance methods), as in"
             .. " strategy.least_loaded()", alloc)
    end
    local rebalance = raw.rebalance
    local rp = child(path, "rebalance")
    if rebalance ~= nil and not strategy.is_policy(rebalance)
        and not strategy.is_strategy(rebalance) then
        fail(rp, "must be a rebalance policy (as in"
             .. " strategy.rate_limited{ threshold = 1 }) or a strategy",
             rebalance)
    end
    local ok, bound = pcall(strategy.bind, alloc, rebalance)
    if not ok then
        fail(rp, tostring(bound), rebalance)
    end
    e.allocation, e.allocation_id = alloc, alloc.id
    e.rebalance, e.rebalance_id = bound, bound.id
end

-- An entity type's own partitioner: function(id, shard_count) -> shard,
-- an integer in 0..shard_count-1, pure and the same on every node. Its
-- id names its code (stripped bytecode), so the cluster's compatibility
-- check refuses a node whose partitioner differs; upvalues are not part
-- of it, so a partitioner should not depend on any.
local function check_partitioner(raw, path, e)
    local f = raw.partitioner
    if f == nil then
        e.partition_id = "fnv1a"
        return
    end
    if type(f) ~= "function" then
        fail(child(path, "partitioner"), "must be a function(id, "
             .. "shard_count) returning a shard in 0..shard_count-1", f)
    end
    e.partitioner = f
    e.partition_id = "custom:" .. partition.hex(string.dump(f, true))
end

-- Persistence of a type (issue 11): "events" (event sourced) or "state"
-- (durable state), its lease settings and its snapshots. The lease limits
-- mirror runtime/core/lease.h (ms_lease_settings_check checks them again).
local LEASE_DURATION_MIN, LEASE_DURATION_MAX = 1, 3600   -- seconds
local LEASE_RENEW_MIN, LEASE_RENEW_RATIO = 0.1, 3
-- recovery reads at most 10,000 events after the snapshot
-- (MS_JOURNAL_MAX_RECOVERY, runtime/io/journal.h): a snapshot at least
-- every 10,000 events keeps every entity recoverable
local MAX_SNAPSHOT_EVERY = 10000

local function check_persistence(raw, path, e)
    local p = raw.persistence
    if p ~= nil and p ~= "events" and p ~= "state" then
        fail(child(path, "persistence"), "must be \"events\" or \"state\""
             .. " (leave it out for an in-memory type)", p)
    end
    e.persistence = p or false
    -- a type that remembers its entities in PostgreSQL holds leases too
    local rem = raw.remember
    local leased = p or (type(rem) == "table" and rem.store == "postgres")
    if not p then
        for _, k in ipairs({ "lease_duration", "lease_renew_interval",
                             "lease_window", "snapshot_every",
                             "delete_events_on_snapshot" }) do
            if raw[k] ~= nil and not (leased and k:find("^lease_")) then
                fail(child(path, k), "applies only to a type with "
                     .. "persistence = \"events\" or \"state\""
                     .. (k:find("^lease_") and " or remember.store = "
                         .. "\"postgres\"" or ""), raw[k])
            end
        end
        if not leased then return end
    end
    e.lease_duration_ms = seconds_field(raw, "lease_duration", path,
                                        LEASE_DURATION_MIN,
                                        LEASE_DURATION_MAX, 10)
    -- in whole milliseconds, as the lease machine checks it
    local renew_max = floor(e.lease_duration_ms / LEASE_RENEW_RATIO) / 1000
    local renew = raw.lease_renew_interval
    if renew == nil then
        renew = math.min(3, renew_max)
    end
    if type(renew) ~= "number" or renew ~= renew or renew < LEASE_RENEW_MIN
        or floor(renew * 1000 + 0.5) > renew_max * 1000 then
        fail(child(path, "lease_renew_interval"), format(
             "must be a number of seconds from %g to lease_duration / %d"
             .. " (%g), so a lease is renewed well before it expires",
             LEASE_RENEW_MIN, LEASE_RENEW_RATIO, renew_max), renew)
    end
    e.lease_renew_interval_ms = floor(renew * 1000 + 0.5)
    local d = e.lease_duration_ms / 1000
    e.lease_window_ms = seconds_field(raw, "lease_window", path, d,
                                      LEASE_DURATION_MAX * 2, 2 * d)
    if not p then return end
    if p == "events" then
        local n = raw.snapshot_every
        if n == false then
            e.snapshot_every = 0
        else
            e.snapshot_every = integer_field(raw, "snapshot_every", path, 1,
                                             MAX_SNAPSHOT_EVERY, 100)
        end
        local del = raw.delete_events_on_snapshot
        if del ~= nil and type(del) ~= "boolean" then
            fail(child(path, "delete_events_on_snapshot"),
                 "must be true or false", del)
        end
        e.delete_events_on_snapshot = del == true
    else
        for _, k in ipairs({ "snapshot_every", "delete_events_on_snapshot" }) do
            if raw[k] ~= nil then
                fail(child(path, k), "applies only to persistence = "
                     .. "\"events\"", raw[k])
            end
        end
        e.snapshot_every = 0
        e.delete_events_on_snapshot = false
    end
end

-- Remember-entities of a type (issue 12): which store records the ids
-- that run, and what a store failure does. Validated here; the node does
-- not act on it yet (it says so at start).
local REMEMBER_FIELDS = {
    store = true, dir = true, fsync = true, keep_on_idle = true,
    on_failure = true,
}
local REMEMBER_STORES = { memory = true, file = true, postgres = true }
local FSYNC_POLICIES = { always = true, on_compaction = true, never = true }

local function check_remember(raw, path, e)
    local r = raw.remember
    if r == nil then
        e.remember = false
        return
    end
    local p = child(path, "remember")
    check_table(r, p)
    check_known(r, p, REMEMBER_FIELDS)
    if not REMEMBER_STORES[r.store] then
        fail(child(p, "store"), "must be \"memory\", \"file\" or "
             .. "\"postgres\"", r.store)
    end
    local out = { store = r.store }
    if r.store == "file" then
        out.dir = string_field(r, "dir", p, { required = true,
                                              max_len = 511 })
        local f = r.fsync
        if f == nil then f = "always" end
        if not FSYNC_POLICIES[f] then
            fail(child(p, "fsync"), "must be \"always\", "
                 .. "\"on_compaction\" or \"never\"", f)
        end
        out.fsync = f
    else
        for _, k in ipairs({ "dir", "fsync" }) do
            if r[k] ~= nil then
                fail(child(p, k), "applies only to store = \"file\"", r[k])
            end
        end
    end
    if r.keep_on_idle ~= nil and type(r.keep_on_idle) ~= "boolean" then
        fail(child(p, "keep_on_idle"), "must be true or false",
             r.keep_on_idle)
    end
    out.keep_on_idle = r.keep_on_idle == true
    local of = r.on_failure
    if of == nil then of = "fail_open" end
    if of ~= "fail_open" and of ~= "fail_closed" then
        fail(child(p, "on_failure"), "must be \"fail_open\" or "
             .. "\"fail_closed\"", of)
    end
    out.on_failure = of
    e.remember = out
end

local function check_entity(name, raw, path)
    check_table(raw, path)
    check_known(raw, path, ENTITY_FIELDS)
    local e = { name = name }
    e.module = string_field(raw, "module", path, {
        required = true, pattern = MODULE_PATTERN,
        pattern_reason = "must be a module name for require()",
    })
    e.shard_count = integer_field(raw, "shard_count", path, 1, 65536, 64)

    local idle = raw.idle_timeout
    if idle == nil then
        idle = 120
    end
    if idle == false then
        e.idle_timeout = false
        e.idle_timeout_ms = 0
    elseif type(idle) == "number" and idle > 0 and idle <= MAX_IDLE_SECONDS then
        e.idle_timeout = idle
        -- Round to milliseconds, but never down to 0, which means "never".
        local ms = floor(idle * 1000 + 0.5)
        e.idle_timeout_ms = ms > 0 and ms or 1
    else
        fail(child(path, "idle_timeout"), format(
             "must be a number of seconds > 0 (at most %g), or false",
             MAX_IDLE_SECONDS), idle)
    end

    local on_error = raw.on_error
    if on_error == nil then
        on_error = "resume"
    end
    if on_error ~= "resume" and on_error ~= "stop" then
        fail(child(path, "on_error"), "must be \"resume\" or \"stop\"",
             on_error)
    end
    e.on_error = on_error
    e.max_pending = integer_field(raw, "max_pending", path, 1, 1000000, 10000)
    e.slow_handler_ms = integer_field(raw, "slow_handler_ms", path, 1,
                                      INT_MAX, 100, true)
    check_strategies(raw, path, e)
    check_partitioner(raw, path, e)
    check_persistence(raw, path, e)
    check_remember(raw, path, e)
    return e
end

local function check_entities(v, path)
    if v == nil then
        fail(path, "required", v)
    end
    if type(v) ~= "table" or next(v) == nil then
        fail(path, "must be a non-empty table of entity types", v)
    end
    local entities, list = {}, {}
    for _, name in ipairs(sorted_keys(v)) do
        local p = child(path, name)
        if type(name) ~= "string" or not find(name, TYPE_PATTERN) then
            fail(p, "entity type name must be a letter followed by letters,"
                 .. " digits or '_'", name)
        end
        local e = check_entity(name, v[name], p)
        entities[name] = e
        list[#list + 1] = e
    end
    return entities, list
end

local function check_limits(v, path)
    local t = v
    if t == nil then
        t = {}
    end
    check_table(t, path)
    check_known(t, path, LIMIT_FIELDS)
    return {
        max_message_bytes = integer_field(t, "max_message_bytes", path,
                                          64, 67108864, 1048576),
        json_max_depth = integer_field(t, "json_max_depth", path,
                                       1, 1000, 64),
        -- how long an HTTP client may take to send a request, stay idle,
        -- or take a response (asks have their own timeout)
        http_timeout_ms = seconds_field(t, "http_timeout", path, 0.1, 3600,
                                        30),
        http_connections = integer_field(t, "http_connections", path,
                                         1, 65536, 1024),
    }
end

-------------------------------------------------------------------------------
-- The cluster secret (issue 9: fail closed)
--
-- A node that may talk to other nodes needs a secret: the config lists more
-- than one node, or a seed other than the one node's own listen address
-- (compared as written: "localhost:7101" is not "127.0.0.1:7101", so such a
-- config needs a secret too). Only a config of one node whose seeds are its
-- own address may leave it out; that node then makes up a random secret of
-- its own at every start (runtime/io/cluster.c), so nobody can join it.
--
-- A secret must be 16..255 bytes without a NUL byte (the host keeps it as a
-- C string), and not obviously guessable. That is the rule below, nothing
-- cleverer: it refuses a secret
--   - with fewer than 6 distinct bytes ("aaaaaaaaaaaaaaaa", "abababab..."),
--   - whose neighbouring bytes differ by fewer than 3 distinct steps
--     ("abcdefghijklmnop", "0123456789012345", "zyxwvutsrqponmlk"),
--   - or that is a shorter piece repeated ("password1password1").
-- A secret from `moonshard secret` (32 random bytes, 64 hex digits) passes.

M.SECRET_MIN_BYTES = 16
M.SECRET_MAX_BYTES = 255 -- runtime/core/config.h keeps 255 bytes and a NUL
local SECRET_MIN_DISTINCT = 6
local SECRET_MIN_STEPS = 3
local SECRET_HINT = "; generate one with `moonshard secret`"

-- Returns nil when `s` (a string) is acceptable as a secret, else the
-- reason. Never puts the secret itself into the reason.
function M.secret_problem(s)
    if type(s) ~= "string" then
        error("bad 'secret' argument (string expected, got " .. type(s)
              .. ")", 2)
    end
    local n = #s
    if n < M.SECRET_MIN_BYTES then
        return format("must be at least %d bytes", M.SECRET_MIN_BYTES)
    end
    if n > M.SECRET_MAX_BYTES then
        return format("must be at most %d bytes", M.SECRET_MAX_BYTES)
    end
    if find(s, "\0", 1, true) then
        return "must not contain a NUL byte"
    end
    local seen, distinct = {}, 0
    local steps, nsteps = {}, 0
    for i = 1, n do
        local b = byte(s, i)
        if not seen[b] then
            seen[b] = true
            distinct = distinct + 1
        end
        if i > 1 then
            local d = (b - byte(s, i - 1)) % 256
            if not steps[d] then
                steps[d] = true
                nsteps = nsteps + 1
            end
        end
    end
    if distinct < SECRET_MIN_DISTINCT then
        return format("is too easy to guess: fewer than %d distinct bytes",
                      SECRET_MIN_DISTINCT)
    end
    if nsteps < SECRET_MIN_STEPS then
        return "is too easy to guess: a run of evenly spaced characters"
    end
    for p = 1, floor(n / 2) do
        if sub(s, p + 1) == sub(s, 1, n - p) then
            return "is too easy to guess: a shorter piece repeated"
        end
    end
    return nil
end

-- Whether a node of `cfg` (its nodes and seeds checked) may talk to
-- another node; nil, or the reason a secret is required.
local function needs_secret(cfg)
    if #cfg.nodes > 1 then
        return "required when the config lists more than one node"
    end
    for _, s in ipairs(cfg.seeds) do
        if s ~= cfg.nodes[1].listen then
            return "required when a seed (" .. s .. ") is not this node's"
                .. " own listen address"
        end
    end
    return nil
end

local function check_secret(cfg)
    local p = { "secret" }
    local s = cfg.secret
    if s == nil then
        local why = needs_secret(cfg)
        if why then
            -- `secret = os.getenv("X")` with X unset lands here too
            fail(p, why .. SECRET_HINT, nil)
        end
        return
    end
    local why = M.secret_problem(s)
    if why then
        -- never echo the secret into an error (it may end up in logs)
        fail(p, why .. SECRET_HINT,
             format("%d byte%s", #s, #s == 1 and "" or "s"))
    end
end

-- TLS (runtime/io/tls.h). `tls` (links between nodes): a CA and, at the
-- top or in each node's entry (which wins), a certificate and its key;
-- every node then has both, since all nodes of a cluster use TLS or none
-- (a plaintext node's handshake is refused by a TLS node). `gateway_tls`
-- (the HTTP gateway): a certificate and key, at the top or per node, and
-- an optional CA whose clients alone are let in. Paths relative to the
-- config file's directory (resolve_paths). The files themselves are
-- checked when the node starts (a missing file, a key that does not
-- match its certificate, a certificate the CA did not sign).
local function check_tls(t, root, cfg, key, ca_required)
    local v = t[key]
    local any_node = nil
    for i, n in ipairs(cfg.nodes) do
        if n[key] and not any_node then
            any_node = i
        end
    end
    if v == nil then
        if any_node then
            fail({ "nodes", any_node, key }, "needs the top-level '" .. key
                 .. "'" .. (ca_required and " (its ca): all nodes of a "
                 .. "cluster use TLS or none" or ""), "a table")
        end
        return nil
    end
    local p = child(root, key)
    check_table(v, p)
    check_known(v, p, TLS_FIELDS)
    local out = {
        ca = string_field(v, "ca", p, { required = ca_required,
                                        max_len = MAX_TLS_PATH }),
        cert = string_field(v, "cert", p, { max_len = MAX_TLS_PATH }),
        key = string_field(v, "key", p, { max_len = MAX_TLS_PATH }),
    }
    for i, n in ipairs(cfg.nodes) do
        local own = n[key] or {}
        local np = { "nodes", i, key }
        for _, f in ipairs({ "cert", "key" }) do
            own[f] = own[f] or out[f]
            if not own[f] then
                fail(n[key] and child(np, f) or np, "required: '" .. key
                     .. "' is on, and node " .. n.name .. " has no " .. f
                     .. " (set " .. key .. "." .. f .. " at the top or in"
                     .. " its entry)", nil)
            end
        end
        n[key] = own
    end
    return out
end

-- The paths of the TLS settings, relative to the directory of `file`
-- (the config file) unless absolute. A path that the directory makes
-- longer than MAX_TLS_PATH fails (the node would read a cut one).
local function resolve_paths(cfg, file)
    local dir = match(file, "^(.*)/[^/]*$")
    if not dir then
        return
    end
    if dir == "" then
        dir = "/"
    end
    local function fix(t, f, path)
        if t and t[f] and sub(t[f], 1, 1) ~= "/" then
            t[f] = dir .. "/" .. t[f]
            if #t[f] > MAX_TLS_PATH then
                fail(path, format("is %d bytes once joined to the config "
                                  .. "file's directory; at most %d",
                                  #t[f], MAX_TLS_PATH), t[f])
            end
        end
    end
    for _, key in ipairs({ "tls", "gateway_tls" }) do
        fix(cfg[key], "ca", { key, "ca" })
        for i, n in ipairs(cfg.nodes) do
            fix(n[key], "cert", { "nodes", i, key, "cert" })
            fix(n[key], "key", { "nodes", i, key, "key" })
        end
    end
end

-- The watchdog (runtime/io/watchdog.h): Lua code that runs this long is
-- logged as stuck; at stuck_handler_exit_ms (false: never) the process
-- exits with status 70.
local MAX_STUCK_MS = 86400000 -- a day

local function check_watchdog(t, root, cfg)
    cfg.stuck_handler_ms = integer_field(t, "stuck_handler_ms", root, 10,
                                         MAX_STUCK_MS, 5000)
    local v = t.stuck_handler_exit_ms
    if v == false then
        cfg.stuck_handler_exit_ms = 0
        return
    end
    if v ~= nil and not (is_integer(v) and v >= cfg.stuck_handler_ms
                         and v <= MAX_STUCK_MS) then
        fail(child(root, "stuck_handler_exit_ms"), format(
             "must be an integer of milliseconds in %d..%d (from "
             .. "stuck_handler_ms on), or false", cfg.stuck_handler_ms,
             MAX_STUCK_MS), v)
    end
    -- the default, 60 s, or stuck_handler_ms when that is longer
    cfg.stuck_handler_exit_ms = v or (cfg.stuck_handler_ms > 60000
                                      and cfg.stuck_handler_ms or 60000)
end

-- The PostgreSQL of persistent types (issue 11): a libpq connection string
-- or postgresql:// URI, parsed by libpq itself. It may hold a password, so
-- no error shows it; the host keeps it in a buffer of 1,024 bytes.
local function check_database(t, root)
    local v = string_field(t, "database", root, { max_len = 1023,
                                                  conceal = true })
    if v and find(v, "%z") then
        fail(child(root, "database"), "must not contain a NUL byte",
             setmetatable({ what = format("%d bytes", #v) }, Concealed))
    end
    return v
end

-- Failure detection and gossip (runtime/core/membership.h): each a number
-- of seconds but the fanout. The bounds keep the membership sane: a
-- heartbeat interval of 50 ms at the least (each member sends one to every
-- other per interval), an unreachable_after of at least two heartbeat
-- intervals (one late answer must not make a member unreachable), a
-- seed_timeout of at least two gossip rounds (the first seed must have
-- had a chance to hear from the others before it founds a cluster alone).
M.MEMBERSHIP = {
    heartbeat_interval = { lo = 0.05, hi = 60, default = 1 },
    unreachable_after = { lo = 0.1, hi = 600, default = 5 },
    gossip_interval = { lo = 0.05, hi = 60, default = 1 },
    seed_timeout = { lo = 0.1, hi = 600, default = 5 },
    lone_leave_timeout = { lo = 0.1, hi = 600, default = 2 },
    gossip_fanout = { lo = 1, hi = 64, default = 3 },
}

local function check_membership(t, root, cfg)
    local B = M.MEMBERSHIP
    local function secs(key)
        local b = B[key]
        return seconds_field(t, key, root, b.lo, b.hi, b.default)
    end
    -- `big` (ms) must be at least twice `small` (ms); the error names
    -- the setting the user changed when the other is its default
    local function twice(small_key, small, big_key, big, why)
        if big >= 2 * small then
            return
        end
        if t[big_key] == nil then
            fail(child(root, small_key), format(
                 "must be at most %s / 2 (%g s, from the default %s; set"
                 .. " that too)", big_key, big / 2000, big_key),
                 t[small_key])
        end
        fail(child(root, big_key), format(
             "must be at least 2 x %s (%g s), %s", small_key,
             2 * small / 1000, why), t[big_key])
    end
    local hb = secs("heartbeat_interval")
    local ua = secs("unreachable_after")
    twice("heartbeat_interval", hb, "unreachable_after", ua,
          "so one late answer does not make a member unreachable")
    local gi = secs("gossip_interval")
    local st = secs("seed_timeout")
    twice("gossip_interval", gi, "seed_timeout", st,
          "so the first seed hears from the others before it founds a"
          .. " cluster")
    cfg.heartbeat_interval_ms = hb
    cfg.unreachable_after_ms = ua
    cfg.gossip_interval_ms = gi
    cfg.seed_timeout_ms = st
    cfg.lone_leave_timeout_ms = secs("lone_leave_timeout")
    local f = B.gossip_fanout
    cfg.gossip_fanout = integer_field(t, "gossip_fanout", root, f.lo, f.hi,
                                      f.default)
end

local function check(t)
    local root = {}
    check_known(t, root, TOP_FIELDS)
    local cfg = {}
    cfg.cluster = string_field(t, "cluster", root, {
        required = true, pattern = NAME_PATTERN, pattern_reason = NAME_REASON,
    })
    -- the host keeps them in fixed buffers (runtime/core/config.h)
    cfg.secret = string_field(t, "secret", root, { max_len = 255,
                                                   conceal = true })
    cfg.admin_token = string_field(t, "admin_token", root, { max_len = 127,
                                                             conceal = true })
    -- the admin endpoints answer clients on other hosts only when asked
    if t.admin_remote ~= nil and type(t.admin_remote) ~= "boolean" then
        fail(child(root, "admin_remote"), "must be true or false",
             t.admin_remote)
    end
    cfg.admin_remote = t.admin_remote == true
    -- the entity endpoints want it when set (X-Moonshard-Api-Token or
    -- Authorization: Bearer); the admin endpoints keep admin_token
    cfg.api_token = string_field(t, "api_token", root, {
        max_len = 127, conceal = true, pattern = "^[!-~]+$",
        pattern_reason = "must be printable ASCII without spaces (it is"
            .. " sent in an HTTP header)",
    })
    local seeds = check_seeds(t.seeds, { "seeds" })
    cfg.nodes = check_nodes(t.nodes, { "nodes" })
    -- Without seeds, the nodes listed are the seeds, the first first: it
    -- forms the cluster once it has heard from the others (or after the
    -- seed timeout), and when it restarts it asks them before it would
    -- found a cluster again. A lone seed that restarts would found a
    -- second cluster beside the first (found by a review).
    if not seeds then
        seeds = {}
        for i = 1, math.min(#cfg.nodes, MAX_SEEDS) do
            seeds[i] = cfg.nodes[i].listen
        end
    end
    cfg.seeds = seeds
    check_secret(cfg)
    cfg.tls = check_tls(t, root, cfg, "tls", true)
    cfg.gateway_tls = check_tls(t, root, cfg, "gateway_tls", false)
    cfg.database = check_database(t, root)
    cfg.entities, cfg.entity_list = check_entities(t.entities, { "entities" })
    cfg.limits = check_limits(t.limits, { "limits" })
    cfg.gc_step_kb = integer_field(t, "gc_step_kb", root, 1, INT_MAX, 64, true)
    -- garbage the Lua collector lets build up between cycles, at most
    -- (and five times the live heap; runtime/lua/vm.c "the collector's
    -- pace"; 0: LuaJIT's own pause)
    cfg.gc_headroom_mb = integer_field(t, "gc_headroom_mb", root, 0,
                                       M.MAX_GC_HEADROOM_MB, 64)
    -- active entities a node holds, across its types, before it passivates
    -- the least recently used idle ones (false or absent: no limit); a
    -- node's entry may set its own
    cfg.max_active_entities = limit_field(t, "max_active_entities", root)
        or false
    cfg.handoff_timeout_ms = seconds_field(t, "handoff_timeout", root,
                                           0.1, 600, 10)
    cfg.rebalance_interval_ms = seconds_field(t, "rebalance_interval", root,
                                              0.1, 3600, 10)
    check_watchdog(t, root, cfg)
    check_membership(t, root, cfg)
    -- log lines as text (log.h's grammar) or one JSON object a line
    local lf = t.log_format
    if lf ~= nil and lf ~= "text" and lf ~= "json" then
        fail(child(root, "log_format"), "must be \"text\" or \"json\"",
             lf)
    end
    cfg.log_format = lf or "text"
    -- membership events (README "Membership events"): a function the
    -- node calls on its loop with each event table
    local hook = t.on_member_event
    if hook ~= nil and type(hook) ~= "function" then
        fail(child(root, "on_member_event"), "must be a function(ev), "
             .. "called with each membership event", hook)
    end
    cfg.on_member_event = hook
    -- a persistent type needs the database, named once at the top, and
    -- so does the postgres store of remember-entities
    for _, e in ipairs(cfg.entity_list) do
        if e.persistence and not cfg.database then
            fail({ "entities", e.name, "persistence" }, "needs a database:"
                 .. " set the top-level 'database' to a PostgreSQL "
                 .. "connection string", e.persistence)
        end
        if e.remember and e.remember.store == "postgres"
            and not cfg.database then
            fail({ "entities", e.name, "remember", "store" }, "needs a "
                 .. "database: set the top-level 'database' to a "
                 .. "PostgreSQL connection string", "postgres")
        end
    end
    -- how long a command's operation id (and its reply) is kept, so a
    -- retry within it is not applied twice
    cfg.operation_retention_ms = seconds_field(t, "operation_retention",
                                               root, 1, 365 * 86400, 86400)
    cfg.database_connections = integer_field(t, "database_connections", root,
                                             1, 64, 4)
    return cfg
end

-------------------------------------------------------------------------------
-- Entry points

-- Validates an already evaluated config table `t`. `file` names it in
-- messages; `source` (optional) is the script's text, used to find lines.
-- Returns the normalized config, or nil and a one-line error.
function M.normalize(t, file, source)
    file = file or "config"
    if type(t) ~= "table" then
        return nil, format("%s:%d: config script must return a table (got %s)",
                           file, locate_return(source), show(t))
    end
    local ok, res = pcall(function()
        local r = check(t)
        resolve_paths(r, file)
        return r
    end)
    if not ok then
        if getmetatable(res) ~= Failure then
            error(res, 0)
        end
        return nil, format("%s:%d: %s: %s (got %s)", file,
                           locate(source, res.path), path_string(res.path),
                           res.reason, show(res.value))
    end
    res.file = file
    return res
end

local function add_search_dir(path)
    local dir = match(path, "^(.*)/[^/]*$") or "."
    if dir == "" then
        dir = "/"
    end
    local prefix = dir .. "/?.lua;" .. dir .. "/?/init.lua;"
    if not find(package.path, prefix, 1, true) then
        package.path = prefix .. package.path
    end
end

-- Runs the config script at `path` and validates its result. The script
-- sees the normal globals (reads go to _G; its own global assignments stay
-- in a private table so they cannot leak into the node's VM), and can
-- require modules that sit beside it: the script's directory is prepended to
-- package.path and stays there, since entity modules often live beside it.
-- Returns the normalized config, or nil and a one-line error.
function M.load(path)
    if type(path) ~= "string" then
        error("bad 'path' argument (string expected, got " .. type(path)
              .. ")", 2)
    end
    -- source text only: LuaJIT runs bytecode unverified, and a damaged
    -- chunk crashes the node (found by fuzz/fuzz_config.c)
    local chunk, err = loadfile(path, "t")
    if not chunk then
        if find(err, "wrong mode", 1, true) then
            err = path .. ": a config file must be Lua source text, not"
                  .. " compiled bytecode"
        end
        return nil, err
    end
    local source
    local f = io_open(path, "rb")
    if f then
        source = f:read("*a")
        f:close()
    end
    add_search_dir(path)
    setfenv(chunk, setmetatable({}, { __index = G }))
    local ok, result = pcall(chunk)
    if not ok then
        if type(result) ~= "string" then
            result = path .. ": " .. tostring(result)
        end
        return nil, result
    end
    return M.normalize(result, path, source)
end

-- Returns the node called `name` (the first node when `name` is nil), or
-- nil and "no node named X in FILE".
function M.find_node(cfg, name)
    if type(cfg) ~= "table" or type(cfg.nodes) ~= "table" then
        error("bad 'cfg' argument (normalized config expected)", 2)
    end
    if name ~= nil and type(name) ~= "string" then
        error("bad 'name' argument (string expected, got " .. type(name)
              .. ")", 2)
    end
    for _, node in ipairs(cfg.nodes) do
        if name == nil or node.name == name then
            return node
        end
    end
    return nil, format("no node named %s in %s", tostring(name),
                       cfg.file or "config")
end

return M

-- moonshard.metrics: a node's counters (the JSON of GET /v1/stats) in the
-- Prometheus text exposition format, version 0.0.4, for GET /metrics.
--
-- Every number of the stats becomes one series named moonshard_<field>
-- (moonshard_<object>_<field> inside an object); counters end in _total.
-- The node's name, cluster and version are the labels of
-- moonshard_build_info; each shard move under way is one series of
-- moonshard_handoff_waiting_messages and moonshard_handoff_seconds,
-- labelled with its type, shard, state and old owner. The "remember"
-- object's numbers are moonshard_remember_<field>; its "types" object
-- gives moonshard_remember_entities{type}, and per shard
-- moonshard_remember_shard_entities{type,shard} and
-- moonshard_remember_shard_failed{type,shard} (1, failed shards only).
-- A field with no entry in FIELDS is still exported (untyped), so nothing
-- goes missing when the stats grow; the unit spec keeps FIELDS complete.

local cjson = require "cjson.safe"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local concat, sort = table.concat, table.sort
local fmt = string.format

local M = {}

-- [stats field] = { kind, help }; kind is "counter" or "gauge".
local FIELDS = {
    routed = { "counter", "Tells and asks accepted into this node's "
        .. "shard queues." },
    delivered = { "counter", "Messages handed to an entity's handler." },
    activations = { "counter", "Entities activated (init ran)." },
    passivations = { "counter", "Entities passivated (stopped ran)." },
    limit_passivations = { "counter", "Entities passivated because the "
        .. "node held more than max_active_entities (also in "
        .. "passivations)." },
    quiet_passivations = { "counter", "Idle entities a handoff passivated "
        .. "at once, without a delivery: their behavior has no stopped "
        .. "(also in passivations)." },
    active_entities = { "gauge", "Entities active on this node." },
    max_active_entities = { "gauge", "The node's active-entity limit "
        .. "(0: none)." },
    handler_errors = { "counter", "Handlers that raised." },
    asks_started = { "counter", "Asks started on this node." },
    asks_timed_out = { "counter", "Asks that ended by their deadline." },
    overflows = { "counter", "Sends refused because a shard queue held "
        .. "max_pending messages." },
    slow_handlers = { "counter", "Handlers that ran past the slow "
        .. "threshold." },
    timers_fired = { "counter", "ctx:after timers that fired." },
    shutdown_drops = { "counter", "Messages dropped because the node "
        .. "stopped." },
    handoff_drops = { "counter", "Messages that reached a shard after its "
        .. "stop for a handoff (failed)." },
    shards_stopped = { "counter", "Shard stops for a handoff finished." },
    pending = { "gauge", "Messages accepted and not yet handled." },
    http_connections = { "gauge", "Open HTTP connections." },
    http_timeouts = { "counter", "HTTP connections closed by a deadline "
        .. "(slow request, idle, slow reader)." },
    http_refused = { "counter", "HTTP connections answered 503: too many "
        .. "open, none idle." },
    http_tls_failures = { "counter", "HTTPS handshakes that failed "
        .. "(gateway_tls): plain HTTP, a client that does not trust the "
        .. "gateway, or one without a certificate its client CA signed." },
    event_streams = { "gauge", "Open GET /v1/events streams." },
    event_streams_cut_off = { "counter", "Event streams ended because "
        .. "their client fell too far behind." },
    event_streams_refused = { "counter", "GET /v1/events answered 503: "
        .. "too many streams." },
    member_events = { "counter", "Membership events made by this node." },
    member_event_hook_calls = { "counter", "Calls of the config's "
        .. "on_member_event." },
    member_event_hook_errors = { "counter", "Calls of on_member_event "
        .. "that raised (or ran past their budget)." },
    member_event_hook_timeouts = { "counter", "Calls of on_member_event "
        .. "stopped at their budget." },
    member_event_hook_slow = { "counter", "Calls of on_member_event that "
        .. "took 100 ms or more." },
    member_event_hook_dropped = { "counter", "Membership events never "
        .. "given to on_member_event (its queue was full)." },
    local_routes = { "counter", "Messages routed to this node's own "
        .. "shards." },
    remote_routes = { "counter", "Messages sent to the owner on another "
        .. "node." },
    forwards = { "counter", "Messages received from other nodes and "
        .. "delivered." },
    not_owner_sent = { "counter", "NOT_OWNER answers sent to nodes with a "
        .. "stale plan." },
    not_owner_retries = { "counter", "Own messages routed again after "
        .. "NOT_OWNER." },
    route_buffered = { "counter", "Messages that waited for an owner." },
    route_overflows = { "counter", "Messages refused because their shard's "
        .. "wait buffer was full." },
    route_expired = { "counter", "Messages that waited past their "
        .. "deadline (failed or dropped)." },
    forward_drops = { "counter", "Tells from other nodes refused here "
        .. "(the shard's mailbox was full); their senders had their 202." },
    stray_answers = { "counter", "Replies or NOT_OWNERs from a node an ask "
        .. "was not sent to (late, or wrong): dropped." },
    bad_payloads = { "counter", "Frames from other nodes whose JSON "
        .. "payload is not strict JSON: refused (an ask gets bad_json)." },
    owned_shards = { "gauge", "Shards this node owns." },
    handoffs_in_progress = { "gauge", "Shards moving, as this node sees "
        .. "them (buffered here)." },
    shards_stopping = { "gauge", "Shards this node is stopping for a "
        .. "handoff." },
    handoffs_seen = { "counter", "Shard moves announced to this node." },
    handoff_buffered = { "counter", "Messages that waited for a moving "
        .. "shard." },
    handoff_overflows = { "counter", "Messages refused because a moving "
        .. "shard's buffer held 1024." },
    shards_handed_off = { "counter", "Shards this node stopped and gave "
        .. "away." },
    lua_heap = { "gauge", "The node's Lua heap in bytes, live and "
        .. "garbage." },
    lua_gc_cycles = { "counter", "Lua collection cycles finished." },
    lua_gc_pause = { "gauge", "The Lua collector's pause in use, in "
        .. "percent (set from gc_headroom_mb each cycle)." },
    lua_gc_headroom = { "gauge", "gc_headroom_mb in bytes: the Lua "
        .. "garbage let build up between cycles, at most (and five times "
        .. "the live heap; 0: LuaJIT's pause)." },
    moves_in_progress = { "gauge", "Moves under way (coordinator only)." },
    moves_peak = { "gauge", "Most moves under way at once (coordinator "
        .. "only)." },
    moves_started = { "counter", "Moves started (coordinator only)." },
    moves_finished = { "counter", "Moves finished (coordinator only)." },
    moves_aborted = { "counter", "Moves rolled back (coordinator only)." },
    moves_rounds = { "counter", "Rebalance rounds run (coordinator "
        .. "only)." },
    moves_strategy_errors = { "counter", "Strategy calls refused "
        .. "(coordinator only)." },
    leases_held = { "gauge", "Shard leases of persistent types held "
        .. "here now." },
    leases_acquired = { "counter", "Shard leases acquired." },
    leases_renewed = { "counter", "Shard lease renewals granted." },
    leases_released = { "counter", "Shard leases released at a handoff." },
    leases_lost = { "counter", "Shard leases lost: a renewal refused or "
        .. "failed (the shard's entities stopped)." },
    leases_expired = { "counter", "Shard leases that ran out before a "
        .. "renewal." },
    leases_fenced = { "counter", "Shard leases left to run out because a "
        .. "member was unreachable (entities stopped)." },
    leases_retries = { "counter", "Lease statements sent again after a "
        .. "failure or a silence." },
    leases_refused = { "counter", "Lease acquires refused: another owner "
        .. "held the row." },
    leases_rejected = { "counter", "Messages rejected with "
        .. "lease_unavailable (the lease window ran out)." },
    leases_db_errors = { "counter", "Lease statements that failed in or "
        .. "before PostgreSQL." },
    leases_waiting = { "gauge", "Messages waiting for a shard's lease." },
    leases_epochs_count = { "gauge", "Shards whose lease is usable for a "
        .. "write now." },
    frames_in = { "counter", "Frames received from authenticated peers." },
    frames_out = { "counter", "Frames sent to peers." },
    rejected_frames = { "counter", "Malformed or unexpected frames; their "
        .. "connection was closed." },
    auth_failures = { "counter", "Peers that failed the handshake." },
    slow_peer_drops = { "counter", "Connections dropped because the peer "
        .. "did not read." },
    link_drops = { "counter", "Tells lost with a connection to a peer "
        .. "that ended before the peer's kernel acknowledged them." },
    handshake_overflows = { "counter", "Incoming connections that found "
        .. "64 others in the handshake (the oldest was evicted)." },
    handshake_evictions = { "counter", "Unauthenticated connections "
        .. "closed to make room for a newer one." },
    handshake_timeouts = { "counter", "Connections closed because a "
        .. "handshake deadline passed." },
    handshake_failures = { "counter", "Incoming connections that ended "
        .. "without authenticating." },
    -- persistent entities (the "persistence" object of the stats)
    persist_commits = { "counter", "Group transactions of persistent "
        .. "entities' writes committed." },
    persist_writes = { "counter", "Writes of persistent entities "
        .. "committed (one command's events, or a state)." },
    persist_events_written = { "counter", "Events written." },
    persist_snapshots = { "counter", "Snapshots written." },
    persist_states_written = { "counter", "Durable states saved or "
        .. "deleted." },
    persist_stale_refused = { "counter", "Writes refused because this "
        .. "node's lease epoch was not current (stale_owner)." },
    persist_conflicts = { "counter", "Writes refused because another "
        .. "writer changed the history (revision_conflict)." },
    persist_db_errors = { "counter", "Loads and writes failed by the "
        .. "database (connection, timeout, query)." },
    persist_recoveries = { "counter", "Entities loaded from the "
        .. "database." },
    persist_commit_latency_count = { "counter", "Writes timed from "
        .. "queueing to commit." },
    persist_commit_latency_sum_us = { "counter", "Their time from "
        .. "queueing to commit, summed, in microseconds." },
    persist_commit_latency_p50_us = { "gauge", "Median commit latency of "
        .. "the last 1024 writes, in microseconds." },
    persist_commit_latency_p99_us = { "gauge", "99th percentile commit "
        .. "latency of the last 1024 writes, in microseconds." },
    -- remember-entities (the "remember" object of the stats)
    remember_queue_max = { "gauge", "Bound of the remember write-behind "
        .. "queue (records queued plus in flight)." },
    remember_queued = { "gauge", "Remember records waiting to be "
        .. "written." },
    remember_inflight = { "gauge", "Remember records in store writes not "
        .. "answered yet." },
    remember_recorded = { "counter", "Starts and stops of remembered "
        .. "entities accepted into the queue." },
    remember_coalesced = { "counter", "Remember records that replaced a "
        .. "queued record of the same id." },
    remember_cancelled = { "counter", "Remember records that cancelled a "
        .. "queued record of the same id (nothing to write)." },
    remember_drops = { "counter", "Remember records dropped because the "
        .. "queue was full (their shard is resynced)." },
    remember_abandoned = { "counter", "Remember records dropped because "
        .. "their shard was released before they were written." },
    remember_resyncs = { "counter", "Store writes that replaced a shard's "
        .. "whole set of ids (after drops)." },
    remember_writes = { "counter", "Remember store writes that "
        .. "succeeded." },
    remember_written = { "counter", "Remember records in the store writes "
        .. "that succeeded." },
    remember_errors = { "counter", "Remember store writes that failed." },
    remember_retries = { "counter", "Remember store writes sent again "
        .. "after a failure." },
    remember_stale_answers = { "counter", "Store answers that matched no "
        .. "remember write out (late)." },
    remember_failed_shards = { "gauge", "Shards failed by a remember "
        .. "store failure (fail_closed) until cleared or moved." },
    remember_eager_starts = { "counter", "Remembered entities activated "
        .. "without a message (eager start)." },
    remember_eager_pending = { "gauge", "Remembered entities still to "
        .. "activate eagerly." },
    remember_eager_dropped = { "counter", "Eager activations dropped "
        .. "because their shard moved away." },
    remember_eager_skipped = { "counter", "Eager activations skipped: the "
        .. "id was stopped after its shard was listed." },
    remember_loads = { "counter", "Shards whose remembered ids were read "
        .. "from the store." },
    remember_load_errors = { "counter", "Reads of a shard's remembered "
        .. "ids that failed." },
    remember_eager_failed = { "counter", "Eager activations that could "
        .. "not be routed or ended in an error." },
    remember_early_drops = { "counter", "Records dropped while their "
        .. "shard's ids were being read (the bound of that wait)." },
    remember_unstorable = { "counter", "Ids not remembered because the "
        .. "store cannot hold them (not UTF-8, for PostgreSQL)." },
}
M.FIELDS = FIELDS

-- The text of a label value: backslash, double quote and newline escaped.
local function label(v)
    return (tostring(v):gsub("[\\\"\n]", { ["\\"] = "\\\\",
                                          ["\""] = "\\\"",
                                          ["\n"] = "\\n" }))
end

local function number(v)
    if v ~= v then return "NaN" end
    if v == math.huge then return "+Inf" end
    if v == -math.huge then return "-Inf" end
    if v == math.floor(v) and v > -2^53 and v < 2^53 then
        return fmt("%.0f", v)
    end
    return fmt("%.17g", v)
end

-- Appends the HELP, TYPE and sample lines of one metric family.
local function family(out, name, kind, help, samples)
    out[#out + 1] = "# HELP " .. name .. " " .. help
    out[#out + 1] = "# TYPE " .. name .. " " .. kind
    for _, s in ipairs(samples) do
        out[#out + 1] = name .. s
    end
end

-- The stats' numbers, flattened: { {field, value}, ... } in name order.
local function numbers(stats)
    local flat = {}
    for k, v in pairs(stats) do
        if type(v) == "number" then
            flat[#flat + 1] = { k, v }
        elseif type(v) == "table" and k ~= "handoffs" then
            -- the "persistence" object is exported as moonshard_persist_*
            local prefix = k == "persistence" and "persist" or k
            for k2, v2 in pairs(v) do
                if type(v2) == "number" then
                    flat[#flat + 1] = { prefix .. "_" .. k2, v2 }
                end
            end
        end
    end
    sort(flat, function(a, b) return a[1] < b[1] end)
    return flat
end

-- A shard number of the stats: a whole number >= 0 below 2^32, else nil.
local function shard_no(v)
    if type(v) == "number" and v >= 0 and v == math.floor(v)
        and v < 2^32 then
        return v
    end
    return nil
end

-- A key of "shards": a shard number's decimal text, else nil.
local function shard_key(k)
    if type(k) == "string" and #k <= 10 and k:match("^%d+$") then
        return shard_no(tonumber(k))
    end
    return nil
end

-- The per-type and per-shard families of the "types" object of
-- stats.remember: { Order = { store, remembered, failed = {3, 7},
-- shards = { ["5"] = 3 } } }. Entries of another shape are left out, so
-- nothing but these three families comes of it.
local function remembered(out, types)
    local names = {}
    for name, t in pairs(type(types) == "table" and types or {}) do
        if type(name) == "string" and type(t) == "table" then
            names[#names + 1] = name
        end
    end
    sort(names)
    local count, per_shard, failed = {}, {}, {}
    for _, name in ipairs(names) do
        local t = types[name]
        local tl = label(name)
        if type(t.remembered) == "number" then
            count[#count + 1] = fmt('{type="%s"} %s', tl,
                                    number(t.remembered))
        end
        local shards = {}
        for k, v in pairs(type(t.shards) == "table" and t.shards or {}) do
            local no = shard_key(k)
            if no and type(v) == "number" then
                shards[#shards + 1] = { no, v }
            end
        end
        sort(shards, function(a, b) return a[1] < b[1] end)
        for _, sv in ipairs(shards) do
            per_shard[#per_shard + 1] = fmt('{type="%s",shard="%.0f"} %s',
                                            tl, sv[1], number(sv[2]))
        end
        local seen, nos = {}, {}
        for _, v in ipairs(type(t.failed) == "table" and t.failed or {}) do
            local no = shard_no(v)
            if no and not seen[no] then
                seen[no] = true
                nos[#nos + 1] = no
            end
        end
        sort(nos)
        for _, no in ipairs(nos) do
            failed[#failed + 1] = fmt('{type="%s",shard="%.0f"} 1', tl, no)
        end
    end
    family(out, "moonshard_remember_entities", "gauge",
           "Remembered entities of a type owned here (as they will be once "
           .. "the queue is written).", count)
    family(out, "moonshard_remember_shard_entities", "gauge",
           "Remembered entities of a shard owned here (shards with none "
           .. "are left out).", per_shard)
    family(out, "moonshard_remember_shard_failed", "gauge",
           "1 for each shard failed by a remember store failure "
           .. "(fail_closed): its messages fail until it is cleared "
           .. "(moonshard remember clear) or moves.", failed)
end

-- render(stats_json) -> the exposition text, or nil and why.
function M.render(stats_json)
    local stats, err = cjson.decode(stats_json)
    if type(stats) ~= "table" then
        return nil, "bad stats: " .. tostring(err or "not an object")
    end
    local out = {}
    family(out, "moonshard_build_info", "gauge",
           "The node's name, cluster and version; always 1.",
           { fmt('{cluster="%s",node="%s",version="%s"} 1',
                 label(stats.cluster or ""), label(stats.node or ""),
                 label(stats.version or "")) })
    for _, kv in ipairs(numbers(stats)) do
        local field, v = kv[1], kv[2]
        local f = FIELDS[field]
        local name = "moonshard_" .. field:gsub("[^%w_]", "_")
        if not f then
            family(out, name, "untyped", "See GET /v1/stats.",
                   { " " .. number(v) })
        elseif f[1] == "counter" then
            family(out, name .. "_total", "counter", f[2],
                   { " " .. number(v) })
        else
            family(out, name, "gauge", f[2], { " " .. number(v) })
        end
    end
    local waiting, age = {}, {}
    for _, h in ipairs(type(stats.handoffs) == "table" and stats.handoffs
                       or {}) do
        local l = fmt('{type="%s",shard="%s",state="%s",from="%s"}',
                      label(h.type or ""), label(h.shard or ""),
                      label(h.state or ""), label(h.from or ""))
        waiting[#waiting + 1] = l .. " " .. number(h.buffered or 0)
        age[#age + 1] = l .. " " .. number((h.for_ms or 0) / 1000)
    end
    family(out, "moonshard_handoff_waiting_messages", "gauge",
           "Messages waiting here for a moving shard (first 64 moves).",
           waiting)
    family(out, "moonshard_handoff_seconds", "gauge",
           "How long a moving shard has been moving, as seen here.", age)
    if type(stats.remember) == "table" then
        remembered(out, stats.remember.types)
    end
    out[#out + 1] = ""
    return concat(out, "\n")
end

return M

-- moonshard.status: `moonshard status` for people. render() takes a
-- node's GET /v1/stats and GET /v1/members bodies, one per line, and lays
-- them out as a few lines of text: the node, the members as it sees them,
-- its entities, routing, shard moves, remembered entities and transport.
-- `moonshard status
-- --json` prints the raw stats instead, for scripts. members() lays out
-- `moonshard members` (GET /v1/members) as a table; `--json` prints the
-- raw answer.

local cjson = require "cjson.safe"

local type, ipairs, pairs, tostring = type, ipairs, pairs, tostring
local fmt, concat, sort = string.format, table.concat, table.sort

local M = {}

local function n(v)
    return type(v) == "number" and fmt("%.0f", v) or "?"
end

-- "1 shard" / "2 shards"
local function count(v, one, many)
    return n(v) .. " " .. (v == 1 and one or many)
end

-- Rows of cells as columns, each left-aligned and padded to its widest.
local function columns(rows, indent)
    local width = {}
    for _, row in ipairs(rows) do
        for i, cell in ipairs(row) do
            if #cell > (width[i] or 0) then width[i] = #cell end
        end
    end
    local out = {}
    for _, row in ipairs(rows) do
        local cells = {}
        for i, cell in ipairs(row) do
            cells[i] = i < #row and cell .. (" "):rep((width[i] or 0) - #cell)
                       or cell
        end
        out[#out + 1] = (indent .. concat(cells, "  "):gsub("%s+$", ""))
    end
    return out
end

-- The lines of the stats' "remember" object (`r`): the queue, writes and
-- eager starts of the node, then one row per remembered type with its
-- count, the shards that hold ids, and its failed shards. None when the
-- node has no remembered type and recorded nothing.
local function remember_lines(r, out)
    if type(r) ~= "table" then return end
    local types = type(r.types) == "table" and r.types or {}
    local names = {}
    for name, t in pairs(types) do
        if type(name) == "string" and type(t) == "table" then
            names[#names + 1] = name
        end
    end
    sort(names)
    if #names == 0 and (r.recorded or 0) + (r.queued or 0)
        + (r.errors or 0) + (r.eager_starts or 0) == 0 then
        return
    end
    out[#out + 1] = fmt("remember: %s queued, %s in flight (at most %s); "
        .. "%s writes, %s errors, %s retries, %s dropped (queue full); "
        .. "%s eager starts, %s pending; %s",
        n(r.queued), n(r.inflight), n(r.queue_max), n(r.writes),
        n(r.errors), n(r.retries), n(r.drops), n(r.eager_starts),
        n(r.eager_pending),
        count(r.failed_shards, "failed shard", "failed shards"))
    local rows = {}
    for _, name in ipairs(names) do
        local t = types[name]
        local held = 0
        for _, v in pairs(type(t.shards) == "table" and t.shards or {}) do
            if type(v) == "number" and v > 0 then held = held + 1 end
        end
        local failed = {}
        for _, v in ipairs(type(t.failed) == "table" and t.failed or {}) do
            if type(v) == "number" then failed[#failed + 1] = v end
        end
        sort(failed)
        for i, v in ipairs(failed) do failed[i] = fmt("%.0f", v) end
        rows[#rows + 1] = {
            name, tostring(t.store or "?"),
            n(t.remembered) .. " remembered",
            "in " .. count(held, "shard", "shards"),
            #failed > 0 and "FAILED shards " .. concat(failed, ",") or "" }
    end
    for _, l in ipairs(columns(rows, "  ")) do out[#out + 1] = l end
end

-- render("STATS_JSON\nMEMBERS_JSON") -> text (ends with a newline);
-- raises when the input is not that (the CLI says why).
function M.render(arg)
    local sj, mj = tostring(arg):match("^([^\n]*)\n(.*)$")
    local s = cjson.decode(sj or "")
    local m = cjson.decode(mj or "")
    if type(s) ~= "table" or type(m) ~= "table"
        or type(m.members) ~= "table" then
        error("not a node's stats and members", 0)
    end
    local names, self_member = {}, nil
    for _, mem in ipairs(m.members) do
        names[mem.uid] = mem.name
        if mem.uid == m.self then self_member = mem end
    end
    local coord = m.coordinator ~= cjson.null and m.coordinator or nil
    local is_coord = coord ~= nil and coord == m.self
    local out = {}
    local function line(...) out[#out + 1] = fmt(...) end

    line("node %s%s, cluster %s, moonshard %s%s", tostring(s.node),
         self_member and " at " .. tostring(self_member.address) or "",
         tostring(s.cluster), tostring(s.version),
         is_coord and " (coordinator)" or "")

    line("members: %d%s", #m.members,
         m.converged and ", converged" or ", not converged")
    local rows = {}
    for _, mem in ipairs(m.members) do
        local notes = {}
        if mem.uid == m.self then notes[#notes + 1] = "this node" end
        if mem.uid == coord then notes[#notes + 1] = "coordinator" end
        if type(mem.roles) == "table" and #mem.roles > 0 then
            notes[#notes + 1] = "roles " .. concat(mem.roles, ",")
        end
        rows[#rows + 1] = { tostring(mem.name), tostring(mem.address),
                            tostring(mem.status),
                            mem.reachable and "reachable" or "UNREACHABLE",
                            concat(notes, ", ") }
    end
    for _, l in ipairs(columns(rows, "  ")) do out[#out + 1] = l end

    line("entities: %s active, %s pending; %s delivered, %s activated, "
         .. "%s passivated", n(s.active_entities), n(s.pending),
         n(s.delivered), n(s.activations), n(s.passivations))
    line("failures: %s handler errors, %s asks timed out, %s overflows, "
         .. "%s slow handlers", n(s.handler_errors), n(s.asks_timed_out),
         n(s.overflows), n(s.slow_handlers))
    line("routing: %s local, %s remote, %s from other nodes (%s dropped); "
         .. "%s waited for an owner, %s expired, %s refused (buffer full)",
         n(s.local_routes), n(s.remote_routes), n(s.forwards),
         n(s.forward_drops), n(s.route_buffered), n(s.route_expired),
         n(s.route_overflows))

    local moving = type(s.handoffs) == "table" and s.handoffs or {}
    line("shards: %s owned here; %s moving, %s stopping here; %s handed "
         .. "off", n(s.owned_shards), n(s.handoffs_in_progress),
         n(s.shards_stopping), n(s.shards_handed_off))
    rows = {}
    for _, h in ipairs(moving) do
        rows[#rows + 1] = { tostring(h.type), "shard " .. n(h.shard),
                            tostring(h.state),
                            "from " .. (names[h.from] or tostring(h.from)),
                            count(h.buffered, "message waiting",
                                  "messages waiting"),
                            fmt("for %.1f s", (h.for_ms or 0) / 1000) }
    end
    for _, l in ipairs(columns(rows, "  ")) do out[#out + 1] = l end
    line("handoff: %s messages waited for a moving shard, %s refused "
         .. "(overflow)", n(s.handoff_buffered), n(s.handoff_overflows))
    if is_coord and type(s.moves) == "table" then
        local mv = s.moves
        line("moves (coordinator): %s in progress (peak %s); %s started, "
             .. "%s finished, %s aborted; %s rebalance rounds, %s strategy "
             .. "errors", n(mv.in_progress), n(mv.peak), n(mv.started),
             n(mv.finished), n(mv.aborted), n(mv.rounds),
             n(mv.strategy_errors))
    end
    local ls = s.leases
    if type(ls) == "table" and ((ls.held or 0) + (ls.acquired or 0)
                                + (ls.waiting or 0) + (ls.db_errors or 0)
                                + (ls.refused or 0)) > 0 then
        -- only with a persistent type: a node without one holds none
        line("leases: %s held; %s acquired, %s renewed, %s released; %s "
             .. "lost, %s expired, %s fenced, %s refused, %s database "
             .. "errors; %s messages waiting, %s rejected", n(ls.held),
             n(ls.acquired), n(ls.renewed), n(ls.released), n(ls.lost),
             n(ls.expired), n(ls.fenced), n(ls.refused), n(ls.db_errors),
             n(ls.waiting), n(ls.rejected))
    end
    remember_lines(s.remember, out)
    line("transport: %s frames in, %s out; %s rejected, %s failed "
         .. "handshakes, %s slow peers dropped, %s tells lost with a "
         .. "connection", n(s.frames_in), n(s.frames_out),
         n(s.rejected_frames), n(s.auth_failures), n(s.slow_peer_drops),
         n(s.link_drops))
    out[#out + 1] = ""
    return concat(out, "\n")
end

-- members(MEMBERS_JSON) -> text: a header line (the node whose view it
-- is, whether converged), then one row per member, oldest first as the
-- node lists them: NAME ADDRESS STATUS REACHABLE ROLES VERSION WEIGHT UP
-- (its up number, "-" before it is Up), the coordinator marked "*" in
-- front and this node "(this node)" after. Raises when the input is not
-- a members answer.
function M.members(arg)
    local m = cjson.decode(tostring(arg))
    if type(m) ~= "table" or type(m.members) ~= "table" then
        error("not a node's members answer", 0)
    end
    local coord = m.coordinator ~= cjson.null and m.coordinator or nil
    local self_name = "?"
    for _, mem in ipairs(m.members) do
        if type(mem) == "table" and mem.uid == m.self then
            self_name = tostring(mem.name)
        end
    end
    local out = { fmt("%d member%s in the view of %s, %s", #m.members,
                      #m.members == 1 and "" or "s", self_name,
                      m.converged and "converged" or "not converged") }
    local rows = { { "", "NAME", "ADDRESS", "STATUS", "REACHABLE", "ROLES",
                     "VERSION", "WEIGHT", "UP", "" } }
    for _, mem in ipairs(m.members) do
        if type(mem) ~= "table" then
            error("not a node's members answer", 0)
        end
        local roles = type(mem.roles) == "table" and #mem.roles > 0
                      and concat(mem.roles, ",") or "-"
        local up = type(mem.up_number) == "number" and mem.up_number > 0
                   and n(mem.up_number) or "-"
        rows[#rows + 1] = {
            coord ~= nil and mem.uid == coord and "*" or "",
            tostring(mem.name), tostring(mem.address), tostring(mem.status),
            mem.reachable == false and "NO" or "yes", roles,
            tostring(mem.version), n(mem.weight), up,
            mem.uid == m.self and "(this node)" or "" }
    end
    for _, l in ipairs(columns(rows, "")) do out[#out + 1] = l end
    out[#out + 1] = coord and "* coordinator" or "no coordinator"
    out[#out + 1] = ""
    return concat(out, "\n")
end

return M

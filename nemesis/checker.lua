-- nemesis/checker.lua: reads what really happened in a nemesis run (the
-- clients' histories and the PostgreSQL journal) and reports every
-- violation of the guarantees DESIGN.md G1-G5 promise. The formats of
-- both inputs and the meaning of each check are in nemesis/README.md.
--
--   local checker = require "nemesis.checker"
--   local history = assert(checker.read_jsonl("history.jsonl"))
--   local journal = assert(checker.read_jsonl("journal.jsonl"))
--   local report = checker.check(history, journal, { max_steps = 1e6 })
--   io.write(checker.format(report))   -- report.ok: no violation, nothing
--                                      -- undecided
--
-- check() raises on input that does not follow the formats (a clear
-- message naming the record); a violation is never an error, it is a row
-- of report.violations { check, entity, message, evidence }.

local cjson = require "cjson.safe"
local bit = require "bit"

local type = type
local pairs = pairs
local ipairs = ipairs
local tostring = tostring
local tonumber = tonumber
local error = error
local sort = table.sort
local concat = table.concat
local format = string.format
local huge = math.huge
local floor = math.floor
local bor, band, bnot, lshift = bit.bor, bit.band, bit.bnot, bit.lshift
local bxor, rshift, tobit = bit.bxor, bit.rshift, bit.tobit

local M = {}

-- The error codes a failed call may end with. The runtime's own (one per
-- row of runtime/core/errors.h and M.codes of lua/moonshard/error.lua;
-- spec/01-unit/nemesis_checker_spec.lua checks both lists agree), the
-- HTTP gateway's own (runtime/io/http.c, http_conn.c) and the client's
-- (the harness writes "connection_refused" when no connection to the
-- gateway could be made, so nothing was sent).
M.runtime_codes = {
    "overflow", "unknown_type", "handler_error", "no_reply", "bad_json",
    "not_object", "unavailable", "ask_self", "config", "partitioner",
    "timeout", "cancelled", "invalid", "too_large", "no_memory", "busy",
    "no_owner", "bad_timeout", "lease_unavailable", "db_query",
    "db_connection", "db_queue_full", "db_schema", "stale_owner",
    "revision_conflict", "remember_store_failed",
}
M.gateway_codes = {
    "bad_request", "not_found", "method_not_allowed", "expectation_failed",
    "too_many_connections", "forbidden", "conflict", "internal",
}
M.client_codes = { "connection_refused" }

-- Codes documented to mean "nothing was applied, and nothing will be
-- later": such a failed call is left out of the register check, and an
-- event carrying its op id is a violation. Every other code (timeout,
-- cancelled, no_reply, db_connection, db_query, no_memory, internal,
-- ...) leaves the outcome open: the call counts as unknown.
M.no_effect_codes = {
    "stale_owner", "revision_conflict", "lease_unavailable", "overflow",
    "no_owner", "unknown_type", "bad_json", "not_object", "invalid",
    "too_large", "bad_timeout", "handler_error", "unavailable",
    "ask_self", "partitioner", "config", "db_queue_full", "db_schema",
    "bad_request", "not_found", "method_not_allowed",
    "expectation_failed", "too_many_connections", "forbidden",
    "connection_refused",
}

M.defaults = {
    max_steps = 1000000, -- per register: search steps before "undecided"
    settle_ms = 0,       -- added to the end of every fault window
    op_field = "op_id",  -- the field of an event's payload with its op id
    part_field = "op_part", -- optional: which event of a multi-event op
    initial = nil,       -- a register's value before any write (null)
    journal_order = true, -- a register with events: take their order
    extra_codes = {},    -- more documented codes (the workload's own)
}

local function set_of(list)
    local s = {}
    for _, v in ipairs(list) do s[v] = true end
    return s
end

local NULL = cjson.null

-- ---------------------------------------------------------------- input

-- Reads a file of one JSON object per line (empty lines skipped).
-- Returns the list of decoded records, or nil and "PATH:LINE: reason".
function M.read_jsonl(path)
    local f, err = io.open(path, "r")
    if not f then
        return nil, err
    end
    local out, n = {}, 0
    for line in f:lines() do
        n = n + 1
        if line:find("%S") then
            local rec, derr = cjson.decode(line)
            if type(rec) ~= "table" then
                f:close()
                return nil, format("%s:%d: %s", path, n,
                                   derr or "not a JSON object")
            end
            rec._line = n
            out[#out + 1] = rec
        end
    end
    f:close()
    return out
end

local function where(rec, what)
    return format("%s record %s", what,
                  rec._line and ("at line " .. rec._line) or "")
end

local function bad(rec, what, msg)
    error(where(rec, what) .. ": " .. msg, 0)
end

-- A canonical text of a JSON value (sorted keys), so two values compare
-- by their text; nil and null are "null".
local function canon(v)
    local t = type(v)
    if v == nil or v == NULL then
        return "null"
    elseif t == "table" then
        local keys, n = {}, 0
        for k in pairs(v) do
            n = n + 1
            keys[n] = k
        end
        local parts = {}
        if n == #v then
            for i = 1, n do parts[i] = canon(v[i]) end
            return "[" .. concat(parts, ",") .. "]"
        end
        for i = 1, n do keys[i] = tostring(keys[i]) end
        sort(keys)
        for i, k in ipairs(keys) do
            local val = v[k]
            if val == nil then val = v[tonumber(k)] end
            parts[i] = format("%q:%s", k, canon(val))
        end
        return "{" .. concat(parts, ",") .. "}"
    elseif t == "string" then
        return format("%q", v)
    elseif t == "number" then
        if v == floor(v) and v > -2^53 and v < 2^53 then
            return format("%d", v)
        end
        return format("%.17g", v)
    end
    return tostring(v)
end
M.canon = canon

local function entity_of(rec)
    return tostring(rec.type) .. "/" .. tostring(rec.id)
end

local KINDS_RECORD = { activation = true, fault = true, seq_seen = true,
                       seq_report = true }
local OUTCOMES = { ok = true, fail = true, unknown = true }

local function check_call(rec)
    for _, k in ipairs({ "client", "op_id", "kind", "type", "id" }) do
        local v = rec[k]
        if (type(v) ~= "string" and type(v) ~= "number") or v == "" then
            bad(rec, "history", "'" .. k .. "' must be a string")
        end
    end
    if type(rec.start) ~= "number" then
        bad(rec, "history", "'start' must be a number (ms)")
    end
    if not OUTCOMES[rec.outcome] then
        bad(rec, "history", "'outcome' must be ok, fail or unknown")
    end
    if rec.outcome ~= "unknown" then
        if type(rec["end"]) ~= "number" then
            bad(rec, "history", "'end' must be a number (ms)")
        end
        if rec["end"] < rec.start then
            bad(rec, "history", "'end' is before 'start'")
        end
    end
    if rec.args ~= nil and type(rec.args) ~= "table" then
        bad(rec, "history", "'args' must be an object")
    end
end

-- The attempts of one operation (a client retried it with the same op
-- id, as README "What stays ambiguous" says to) as one call: it took
-- effect at most once, between the first start and the first ok end.
-- Ok if an attempt was ok (its reply is the operation's), failed if
-- every attempt was refused, else unknown.
local function merge(list, no_effect)
    local first = list[1]
    if #list == 1 then
        return first
    end
    local m = {}
    for k, v in pairs(first) do m[k] = v end
    m.attempts = #list
    local ok, open, last_end = nil, false, first["end"]
    for _, a in ipairs(list) do
        if a.kind ~= first.kind or a.type ~= first.type
           or tostring(a.id) ~= tostring(first.id)
           or canon(a.args) ~= canon(first.args) then
            bad(a, "history", "op_id " .. tostring(a.op_id) .. " names "
                .. "another call before (an op id's retries must repeat "
                .. "its kind, type, id and args)")
        end
        if a.start < m.start then m.start = a.start end
        if a.outcome == "ok" then
            if not ok or a["end"] < ok["end"] then ok = a end
        elseif a.outcome == "unknown" or not no_effect[a.error] then
            open = true
        end
        if a["end"] and (not last_end or a["end"] > last_end) then
            last_end = a["end"]
        end
    end
    if ok then
        m.outcome, m.value, m.error, m["end"] = "ok", ok.value, nil,
                                               ok["end"]
    elseif open then
        m.outcome, m.value, m.error, m["end"] = "unknown", nil, nil, nil
    else
        m.outcome, m.error, m["end"] = "fail", list[#list].error, last_end
    end
    return m
end

-- ------------------------------------------------------- report helpers

local function add(report, check, entity, message, evidence)
    local v = report.violations
    v[#v + 1] = { check = check, entity = entity, message = message,
                  evidence = evidence or {} }
end

-- Did this call write (so its event must be in the journal)?
local function wrote(call)
    if call.outcome ~= "ok" then
        return false
    end
    local k = call.kind
    if k == "add" or k == "write" or k == "put" then
        return true
    end
    if k == "cas" then
        return type(call.value) == "table" and call.value.ok == true
    end
    return false
end

-- Did the system say this call was not applied?
local function refused(call, no_effect)
    if call.outcome == "fail" then
        return no_effect[call.error] == true
    end
    return call.kind == "cas" and call.outcome == "ok"
        and type(call.value) == "table" and call.value.ok == false
end

-- ----------------------------------------- 1. single writer (per entity)

local function check_single_writer(report, events)
    local by_entity = {}
    for _, ev in ipairs(events) do
        local e = entity_of(ev)
        local list = by_entity[e]
        if not list then
            list = {}
            by_entity[e] = list
        end
        list[#list + 1] = ev
    end
    local names = {}
    for e in pairs(by_entity) do names[#names + 1] = e end
    sort(names)
    for _, e in ipairs(names) do
        local list = by_entity[e]
        sort(list, function(a, b) return a.sequence < b.sequence end)
        local max_epoch, max_at = nil, nil
        for i, ev in ipairs(list) do
            local prev = list[i - 1]
            if prev and prev.sequence == ev.sequence then
                add(report, "single_writer", e, format(
                    "two events with sequence %d", ev.sequence),
                    { prev, ev })
            elseif prev and ev.sequence ~= prev.sequence + 1 then
                add(report, "single_writer", e, format(
                    "the history has a hole: sequence %d follows %d",
                    ev.sequence, prev.sequence), { prev, ev })
            end
            if max_epoch and ev.epoch < max_epoch then
                local msg = format("stale write: epoch %d at sequence %d "
                    .. "after epoch %d at sequence %d", ev.epoch,
                    ev.sequence, max_epoch, max_at.sequence)
                if prev and prev.epoch ~= ev.epoch then
                    for j = i - 1, 1, -1 do
                        if list[j].epoch == ev.epoch then
                            msg = msg .. format(" (epoch %d interleaves: "
                                .. "it wrote sequence %d before)",
                                ev.epoch, list[j].sequence)
                            break
                        end
                    end
                end
                add(report, "single_writer", e, msg, { max_at, ev })
            elseif not max_epoch or ev.epoch > max_epoch then
                max_epoch, max_at = ev.epoch, ev
            end
        end
    end
end

-- --------------------- 2. lost writes, 3. double application (op ids)

local function check_ops(report, calls, events, ops_rows, no_effect)
    local by_op = {} -- op id -> events carrying it
    for _, ev in ipairs(events) do
        local op = ev.op_id
        if op ~= nil then
            local list = by_op[op]
            if not list then
                list = {}
                by_op[op] = list
            end
            list[#list + 1] = ev
        end
    end
    local op_rows = {}
    for _, row in ipairs(ops_rows) do
        op_rows[tostring(row.op_id)] = row
    end
    for _, call in ipairs(calls) do
        local op = tostring(call.op_id)
        local found = by_op[op] or {}
        local here = {}
        for _, ev in ipairs(found) do
            if ev.type == call.type and tostring(ev.id) == tostring(call.id)
            then
                here[#here + 1] = ev
            end
        end
        local e = entity_of(call)
        if wrote(call) and #here == 0 then
            local why = "acknowledged write " .. op .. " (" .. call.kind
                .. ") has no event in the journal"
            if #found > 0 then
                why = why .. format("; its op id is in %s's journal",
                                    entity_of(found[1]))
            elseif op_rows[op] then
                why = why .. "; moonshard_operations holds the op id"
            end
            add(report, "lost_write", e, why, { call })
        elseif refused(call, no_effect) and #here > 0 then
            add(report, "refused_write_applied", e, format(
                "call %s was answered %s but its event is in the journal",
                op, call.outcome == "fail" and call.error
                or "as not applied"), { call, here[1] })
        end
    end
    local ops = {}
    for op in pairs(by_op) do ops[#ops + 1] = op end
    sort(ops)
    for _, op in ipairs(ops) do
        local list = by_op[op]
        local seen = {}
        for _, ev in ipairs(list) do
            local part = ev.op_part == nil and "" or canon(ev.op_part)
            local first = seen[part]
            if first then
                add(report, "double_application", entity_of(ev), format(
                    "op id %s applied twice: %s sequence %d (epoch %d) "
                    .. "and %s sequence %d (epoch %d)", op,
                    entity_of(first), first.sequence, first.epoch,
                    entity_of(ev), ev.sequence, ev.epoch), { first, ev })
            else
                seen[part] = ev
            end
        end
    end
end

-- ------------------------------------- 4. linearizable compare-and-set

-- One register operation for the search: { call, kind, cs (start), ce
-- (end, huge when unknown), a, b (canonical args), res (canonical
-- observed value or false), swapped (cas: true, false or nil = unknown),
-- definite (it must be linearized) }.
local function register_op(call, no_effect, applied, covered)
    local args = type(call.args) == "table" and call.args or {}
    local value = type(call.value) == "table" and call.value or {}
    local op = { call = call, kind = call.kind, cs = call.start,
                 ce = call["end"] or huge, definite = true }
    if call.outcome == "fail" then
        if no_effect[call.error] then
            return nil
        end
        op.definite = false
    elseif call.outcome == "unknown" then
        op.definite = false
    end
    local seq = call.kind ~= "read" and applied[tostring(call.op_id)]
    op.seq = seq or nil
    if not op.definite and seq then
        -- the journal holds its event: it took effect, at some time
        -- after its start
        op.definite, op.ce = true, huge
        if call.kind == "cas" then
            op.a, op.b, op.swapped = canon(args.expect), canon(args.value),
                                     true
            return op
        end
    elseif not op.definite and covered then
        return nil -- the journal is the truth: it never took effect
    elseif not op.definite then
        op.ce = huge
        if call.kind == "read" then
            return nil -- an unknown read constrains nothing
        end
    end
    if call.kind == "read" then
        op.res = canon(value.value)
    elseif call.kind == "write" then
        op.b = canon(args.value)
    else -- cas
        op.a, op.b = canon(args.expect), canon(args.value)
        if op.definite and call.outcome == "ok" then
            if value.ok ~= true and value.ok ~= false then
                bad(call, "history", "an ok cas needs value.ok "
                    .. "(true or false)")
            end
            op.swapped = value.ok
            if value.ok == false and value.current ~= nil then
                op.res = canon(value.current)
            end
        end
    end
    return op
end

-- The register's step: the new state if `op` may take effect in
-- `state`, else nil.
local function step(state, op)
    local k = op.kind
    if k == "read" then
        if op.res == state then return state end
        return nil
    elseif k == "write" then
        return op.b
    end
    if op.swapped == nil then -- unknown cas: takes effect iff it matches
        if state == op.a then return op.b end
        return state
    elseif op.swapped then
        if state == op.a then return op.b end
        return nil
    end
    if state ~= op.a and (op.res == nil or op.res == state) then
        return state
    end
    return nil
end

local function describe_op(op)
    local c = op.call
    local s = format("%s %s [%s..%s] %s", tostring(c.op_id), c.kind,
                     tostring(c.start), tostring(c["end"] or "?"),
                     c.outcome)
    if c.kind == "cas" then
        s = s .. format(" %s->%s", op.a, op.b)
        if op.swapped ~= nil then
            s = s .. (op.swapped and " swapped" or " refused")
        end
    elseif c.kind == "write" then
        s = s .. " " .. op.b
    elseif op.res then
        s = s .. " read " .. op.res
    end
    return s
end

-- Wing & Gong's search with Lowe's cache (as Porcupine does it): walk the
-- calls in time order, linearize a call whose start precedes every
-- pending end, back up when an end is reached first. Returns "ok",
-- "violation" or "undecided", and the evidence.
-- The last calls of the deepest prefix kept as a violation's evidence
-- (the whole prefix can hold tens of thousands).
local PREFIX_SHOWN = 20

-- Two 32-bit Zobrist words per call: the cache key of a set of
-- linearized calls is their XOR (O(1) per step, where the set's bit
-- string costs O(calls) and made long histories quadratic). The words
-- come from two xorshift generators of different shift triples: taken
-- from one generator, a call's second word was its first after one more
-- (linear) step, a function of the first, and the key had 32 bits in all
-- (any 33 calls held a subset whose key is 0).
local function xorshift(x, a, b, c)
    return function()
        x = bxor(x, lshift(x, a))
        x = bxor(x, rshift(x, b))
        x = bxor(x, lshift(x, c))
        return tobit(x)
    end
end

local function zobrist(n)
    local z1, z2 = {}, {}
    local g1 = xorshift(0x2545F491, 13, 17, 5)
    local g2 = xorshift(0x6C8E9CF5, 1, 3, 10)
    for i = 1, n do z1[i], z2[i] = g1(), g2() end
    return z1, z2
end
M.zobrist = zobrist -- the words of calls 1..n (for the unit spec)

-- exact: the cache key is the set's bit string itself (no collision; a
-- violation found with the hashed key is confirmed this way, since a
-- collision can only prune a branch, never make a false pass).
local function search(ops, initial, max_steps, exact)
    -- the journal's order of the register's writes: op.rank 1, 2, ...
    local ranked = {}
    for _, op in ipairs(ops) do
        if op.seq then ranked[#ranked + 1] = op end
    end
    sort(ranked, function(x, y) return x.seq < y.seq end)
    for i, op in ipairs(ranked) do op.rank = i end
    local n = #ops
    local nodes = {}
    for i, op in ipairs(ops) do
        op.index = i
        nodes[#nodes + 1] = { op = op, call = true, t = op.cs }
        if op.definite then
            nodes[#nodes + 1] = { op = op, call = false, t = op.ce }
        end
    end
    -- calls before ends at one instant: touching windows overlap
    sort(nodes, function(a, b)
        if a.t ~= b.t then return a.t < b.t end
        if a.call ~= b.call then return a.call end
        return a.op.index < b.op.index
    end)
    local head = { }
    local prev = head
    local ret_of = {}
    for _, node in ipairs(nodes) do
        prev.next = node
        node.prev = prev
        prev = node
        if not node.call then ret_of[node.op.index] = node end
    end
    for _, node in ipairs(nodes) do
        if node.call then node.ret = ret_of[node.op.index] end
    end

    local remaining = 0
    for _, op in ipairs(ops) do
        if op.definite then remaining = remaining + 1 end
    end
    local words = {}
    for w = 1, floor((n - 1) / 30) + 1 do words[w] = 0 end
    local z1, z2 = zobrist(n)
    local h1, h2 = 0, 0
    local function flip(i, on)
        local w = floor((i - 1) / 30) + 1
        local m = lshift(1, (i - 1) % 30)
        words[w] = on and bor(words[w], m) or band(words[w], bnot(m))
        h1, h2 = bxor(h1, z1[i]), bxor(h2, z2[i])
    end
    local function unlink(node)
        node.prev.next = node.next
        if node.next then node.next.prev = node.prev end
    end
    local function relink(node)
        node.prev.next = node
        if node.next then node.next.prev = node end
    end

    local cache, stack, depth = {}, {}, 0
    local best, best_depth, best_fail = {}, 0, nil
    local state, pos = initial, 0 -- pos: rank of the last write placed
    local entry = head.next
    local steps = 0
    while remaining > 0 do
        steps = steps + 1
        if steps > max_steps then
            return "undecided", { steps = steps - 1, depth = best_depth }
        end
        if entry ~= nil and entry.call then
            local op = entry.op
            local nstate = nil
            if not op.rank or op.rank == pos + 1 then
                nstate = step(state, op)
            end
            local linearized = false
            if nstate ~= nil then
                flip(op.index, true)
                local key
                if exact then
                    key = concat(words, ",") .. "|" .. nstate
                else
                    key = h1 .. ":" .. h2 .. "|" .. nstate
                end
                if not cache[key] then
                    cache[key] = true
                    depth = depth + 1
                    stack[depth] = { node = entry, state = state,
                                     pos = pos }
                    state = nstate
                    pos = op.rank or pos
                    unlink(entry)
                    if entry.ret then
                        unlink(entry.ret)
                        remaining = remaining - 1
                    end
                    linearized = true
                    if depth > best_depth then
                        best_depth = depth
                        local from = math.max(1, depth - PREFIX_SHOWN + 1)
                        for i = from, depth do
                            best[i - from + 1] = stack[i].node.op
                        end
                        for i = depth - from + 2, #best do best[i] = nil end
                    end
                    entry = head.next
                else
                    flip(op.index, false)
                end
            end
            if not linearized then
                entry = entry.next
            end
        else
            -- an end came before its call could be placed (nil: only
            -- unknown calls were ahead, which cannot happen while a
            -- definite call is left, but backing up is safe): back up
            if entry ~= nil and depth == best_depth then
                best_fail = entry.op
            end
            if depth == 0 then
                return "violation", { prefix = best, depth = best_depth,
                                      blocked = best_fail, steps = steps }
            end
            local top = stack[depth]
            stack[depth] = nil
            depth = depth - 1
            local node = top.node
            state, pos = top.state, top.pos
            flip(node.op.index, false)
            if node.ret then
                relink(node.ret)
                remaining = remaining + 1
            end
            relink(node)
            entry = node.next
        end
    end
    return "ok", { steps = steps }
end

local REGISTER_KINDS = { cas = true, read = true, write = true }

local function check_registers(report, calls, events, opts, no_effect)
    local regs, names = {}, {}
    local applied = {} -- "type/id" -> op id -> its first sequence
    for _, ev in ipairs(events) do
        if ev.op_id then
            local e = entity_of(ev)
            local t = applied[e] or {}
            applied[e] = t
            if not t[ev.op_id] or ev.sequence < t[ev.op_id] then
                t[ev.op_id] = ev.sequence
            end
        end
    end
    for _, call in ipairs(calls) do
        if REGISTER_KINDS[call.kind] then
            local key = entity_of(call)
            if type(call.args) == "table" and call.args.key ~= nil then
                key = key .. "#" .. tostring(call.args.key)
            end
            local list = regs[key]
            if not list then
                list = {}
                regs[key] = list
                names[#names + 1] = key
            end
            list[#list + 1] = call
        end
    end
    sort(names)
    local initial = canon(opts.initial)
    for _, name in ipairs(names) do
        local ops, covered = {}, false
        local mine = applied[entity_of(regs[name][1])] or {}
        if opts.journal_order then
            for _, call in ipairs(regs[name]) do
                if call.kind ~= "read" and mine[tostring(call.op_id)] then
                    covered = true
                end
            end
        else
            mine = {}
        end
        for _, call in ipairs(regs[name]) do
            local op = register_op(call, no_effect, mine, covered)
            if op then ops[#ops + 1] = op end
        end
        report.stats.registers = report.stats.registers + 1
        local verdict, ev = search(ops, initial, opts.max_steps)
        if verdict == "violation" then
            report.stats.search_steps = report.stats.search_steps + ev.steps
            verdict, ev = search(ops, initial, opts.max_steps, true)
        end
        report.stats.search_steps = report.stats.search_steps + ev.steps
        if verdict == "violation" then
            local lines = {}
            for i, op in ipairs(ev.prefix) do
                lines[i] = describe_op(op)
            end
            local msg = "no linearization of the register's calls"
            if ev.blocked then
                msg = msg .. format(": after %d call(s) in order (the "
                    .. "last %d below), call %s ended with no legal place",
                    ev.depth, #ev.prefix, tostring(ev.blocked.call.op_id))
            end
            add(report, "linearizable_cas", name, msg, {
                longest_prefix = lines,
                blocked = ev.blocked and describe_op(ev.blocked) })
        elseif verdict == "undecided" then
            report.undecided[#report.undecided + 1] = {
                check = "linearizable_cas", entity = name,
                message = format("search bound of %d steps hit (%d "
                    .. "calls; deepest prefix %d): neither proved nor "
                    .. "refuted", opts.max_steps, #ops, ev.depth) }
        end
    end
end

-- -------------------------------- 5. FIFO per sender, one activation

local function check_fifo(report, records)
    for _, rec in ipairs(records) do
        local e = entity_of(rec)
        local v = rec.value
        if type(v) ~= "table" then
            bad(rec, "history", "'value' must be an object")
        end
        if rec.kind == "seq_seen" then
            local senders = {}
            for s in pairs(v) do senders[#senders + 1] = tostring(s) end
            sort(senders)
            for _, s in ipairs(senders) do
                local list = v[s]
                if type(list) ~= "table" then
                    bad(rec, "history", "value." .. s .. " must be a list")
                end
                for _, n in ipairs(list) do
                    if type(n) ~= "number" then
                        bad(rec, "history", "value." .. s .. " must be "
                            .. "a list of numbers")
                    end
                end
                for i = 2, #list do
                    if list[i] <= list[i - 1] then
                        add(report, "fifo", e, format(
                            "sender %s: n=%s handled after n=%s", s,
                            tostring(list[i]), tostring(list[i - 1])),
                            { sender = s, position = i,
                              around = { list[i - 1], list[i] } })
                        break
                    end
                end
            end
        elseif type(v.reorders) == "number" and v.reorders > 0 then
            add(report, "fifo", e, format("the entity counted %d "
                .. "reorder(s)", v.reorders),
                { first_problem = v.first_problem, reorders = v.reorders })
        end
    end
end

-- The parts of [a, b] outside every window of `faults` (sorted by start,
-- merged), as a list of {from, to}.
local function outside(a, b, faults)
    local out, from = {}, a
    for _, f in ipairs(faults) do
        if f[1] > b then break end
        if f[2] >= from then
            if f[1] > from then out[#out + 1] = { from, f[1] } end
            from = f[2]
        end
        if from >= b then return out end
    end
    if from < b then out[#out + 1] = { from, b } end
    return out
end

local function check_activations(report, acts, fault_recs, opts, t_end)
    local faults = {}
    for _, f in ipairs(fault_recs) do
        if type(f.start) ~= "number" then
            bad(f, "history", "a fault needs 'start' (ms)")
        end
        local stop = f["end"]
        if stop == nil or stop == NULL then
            stop = huge
        elseif type(stop) ~= "number" or stop < f.start then
            bad(f, "history", "a fault's 'end' must be a number not "
                .. "before its 'start'")
        end
        faults[#faults + 1] = { f.start, stop + opts.settle_ms }
    end
    sort(faults, function(x, y) return x[1] < y[1] end)
    local merged = {}
    for _, f in ipairs(faults) do
        local last = merged[#merged]
        if last and f[1] <= last[2] then
            if f[2] > last[2] then last[2] = f[2] end
        else
            merged[#merged + 1] = { f[1], f[2] }
        end
    end
    local by_entity, names = {}, {}
    for _, a in ipairs(acts) do
        if type(a.start) ~= "number" or a.node == nil then
            bad(a, "history", "an activation needs 'node' and 'start'")
        end
        local e = entity_of(a)
        if not by_entity[e] then
            by_entity[e] = {}
            names[#names + 1] = e
        end
        local stop = a["end"]
        if stop == nil or stop == NULL then
            stop = t_end
        elseif type(stop) ~= "number" or stop < a.start then
            bad(a, "history", "an activation's 'end' must be a number "
                .. "not before its 'start'")
        end
        local list = by_entity[e]
        list[#list + 1] = { rec = a, s = a.start, e = stop }
    end
    sort(names)
    for _, e in ipairs(names) do
        local list = by_entity[e]
        sort(list, function(x, y) return x.s < y.s end)
        for i = 1, #list do
            for j = i + 1, #list do
                local x, y = list[i], list[j]
                if y.s >= x.e then break end
                local free = outside(y.s, math.min(x.e, y.e), merged)
                if #free > 0 then
                    add(report, "single_activation", e, format(
                        "active on %s and %s at once from %s to %s, "
                        .. "with no fault active", tostring(x.rec.node),
                        tostring(y.rec.node), tostring(free[1][1]),
                        tostring(free[1][2])), { x.rec, y.rec })
                end
            end
        end
    end
end

-- ---------------------------------------------- 6. documented errors

local function check_errors(report, calls, known)
    for _, call in ipairs(calls) do
        if call.outcome == "fail" and not known[call.error] then
            add(report, "undocumented_error", entity_of(call), format(
                "call %s failed with %s, not a documented error code",
                tostring(call.op_id), call.error == nil and "no code"
                or ("'" .. tostring(call.error) .. "'")), { call })
        end
    end
end

-- ---------------------------------------------------------------- check

local function journal_rows(journal, opts)
    local events, ops = {}, {}
    for _, row in ipairs(journal or {}) do
        if row.table == "events" then
            if type(row.sequence) ~= "number"
               or type(row.epoch) ~= "number" or row.type == nil
               or row.id == nil then
                bad(row, "journal", "an event needs type, id, "
                    .. "sequence and epoch (numbers)")
            end
            local p = row.payload
            if type(p) == "string" then
                local dec = cjson.decode(p)
                if type(dec) ~= "table" then
                    bad(row, "journal", "payload is not a JSON object")
                end
                p = dec
            end
            if type(p) ~= "table" then
                bad(row, "journal", "payload must be an object or its text")
            end
            local op = p[opts.op_field]
            events[#events + 1] = {
                type = row.type, id = row.id, sequence = row.sequence,
                epoch = row.epoch, payload = p,
                op_id = op ~= nil and op ~= NULL and tostring(op) or nil,
                op_part = p[opts.part_field], _line = row._line }
        elseif row.table == "operations" then
            if row.op_id == nil then
                bad(row, "journal", "an operation needs op_id")
            end
            ops[#ops + 1] = row
        else
            bad(row, "journal", "'table' must be events or operations")
        end
    end
    return events, ops
end

-- Checks a history (list of records) against a journal (list of rows,
-- may be nil) and returns the report { ok, violations, undecided, stats }.
-- `options` (optional) overrides M.defaults. Raises a string error on a
-- malformed record, naming its line.
function M.check(history, journal, options)
    local opts = {}
    for k, v in pairs(M.defaults) do opts[k] = v end
    for k, v in pairs(options or {}) do opts[k] = v end
    if type(opts.max_steps) ~= "number" or opts.max_steps < 1 then
        error("bad 'max_steps' option (positive number expected)", 2)
    end
    local known = set_of(M.runtime_codes)
    for _, list in ipairs({ M.gateway_codes, M.client_codes,
                            opts.extra_codes }) do
        for _, c in ipairs(list) do known[c] = true end
    end
    local no_effect = set_of(M.no_effect_codes)

    local calls, acts, faults, seqs = {}, {}, {}, {}
    local t_end = 0
    local attempts, order = {}, {}
    for _, rec in ipairs(history) do
        local k = rec.kind
        if k == "activation" then
            acts[#acts + 1] = rec
        elseif k == "fault" then
            faults[#faults + 1] = rec
        elseif KINDS_RECORD[k] then
            seqs[#seqs + 1] = rec
        else
            check_call(rec)
            local op = tostring(rec.op_id)
            if not attempts[op] then
                attempts[op] = {}
                order[#order + 1] = op
            end
            local list = attempts[op]
            list[#list + 1] = rec
            calls[#calls + 1] = rec
        end
        for _, t in ipairs({ rec.start, rec["end"] }) do
            if type(t) == "number" and t > t_end then t_end = t end
        end
    end
    local events, ops = journal_rows(journal, opts)

    local report = { violations = {}, undecided = {}, stats = {
        calls = #calls, events = #events, operations = #ops,
        registers = 0, search_steps = 0, activations = #acts,
        faults = #faults } }
    check_single_writer(report, events)
    local logical = {}
    for i, op in ipairs(order) do
        logical[i] = merge(attempts[op], no_effect)
    end
    report.stats.operations_called = #logical
    check_ops(report, logical, events, ops, no_effect)
    check_registers(report, logical, events, opts, no_effect)
    check_fifo(report, seqs)
    check_activations(report, acts, faults, opts, t_end)
    check_errors(report, calls, known)
    report.ok = #report.violations == 0 and #report.undecided == 0
    return report
end

-- --------------------------------------------------------------- format

local function brief(v)
    if type(v) ~= "table" then return tostring(v) end
    local copy = {}
    for k, x in pairs(v) do
        if k ~= "_line" then copy[k] = x end
    end
    local s = cjson.encode(copy) or "?"
    if v._line then s = "line " .. v._line .. ": " .. s end
    return s
end

-- The report as text: one block per violation and undecided register,
-- then a summary line ("OK", "VIOLATIONS", "UNDECIDED").
function M.format(report)
    local out = {}
    for _, v in ipairs(report.violations) do
        out[#out + 1] = format("VIOLATION %s %s: %s", v.check, v.entity,
                               v.message)
        local ev = v.evidence
        if ev.longest_prefix then
            for _, l in ipairs(ev.longest_prefix) do
                out[#out + 1] = "  linearized: " .. l
            end
            if ev.blocked then
                out[#out + 1] = "  blocked:    " .. ev.blocked
            end
        else
            for _, x in ipairs(ev) do
                out[#out + 1] = "  " .. brief(x)
            end
            for k, x in pairs(ev) do
                if type(k) == "string" then
                    out[#out + 1] = format("  %s: %s", k, brief(x))
                end
            end
        end
    end
    for _, u in ipairs(report.undecided) do
        out[#out + 1] = format("UNDECIDED %s %s: %s", u.check, u.entity,
                               u.message)
    end
    local s = report.stats
    out[#out + 1] = format("%s: %d calls, %d registers (%d search "
        .. "steps), %d events, %d operations, %d activations, %d faults; "
        .. "%d violation(s), %d undecided",
        #report.violations > 0 and "VIOLATIONS"
        or (#report.undecided > 0 and "UNDECIDED" or "OK"),
        s.calls, s.registers, s.search_steps, s.events, s.operations,
        s.activations, s.faults, #report.violations, #report.undecided)
    return concat(out, "\n") .. "\n"
end

return M

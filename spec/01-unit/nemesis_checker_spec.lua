-- The nemesis history checker (nemesis/checker.lua): a clean history
-- passes, each doctored one is found, tricky linearizable ones pass.
package.path = "./?.lua;" .. package.path

local checker = require "nemesis.checker"
local errors = require "moonshard.error"

-- A call of the history: kind, op id, window, outcome, args, reply.
local function call(kind, op, s, e, outcome, args, value, err)
    return { client = "c1", op_id = op, kind = kind, type = "Reg",
             id = "r1", start = s, ["end"] = e, outcome = outcome,
             args = args, value = value, error = err }
end

local function cas(op, s, e, expect, new, swapped, outcome)
    return call("cas", op, s, e, outcome or "ok",
                { expect = expect, value = new },
                (outcome or "ok") == "ok" and { ok = swapped } or nil)
end

local function ev(id, seq, epoch, op, typ)
    return { table = "events", type = typ or "Reg", id = id,
             sequence = seq, epoch = epoch,
             payload = op and ('{"op_id":"' .. op .. '"}') or "{}" }
end

local function checks(report)
    local out = {}
    for _, v in ipairs(report.violations) do
        out[#out + 1] = v.check
    end
    table.sort(out)
    return out
end

-- A clean run: a register's CAS chain, a counter's adds, a sequence
-- entity, activations around a fault, failed calls with documented
-- codes.
local function clean()
    local history = {
        cas("o1", 0, 10, nil, 1, true),
        cas("o2", 12, 20, 1, 2, true),
        cas("o3", 15, 25, 1, 3, false),
        call("read", "o4", 30, 31, "ok", {}, { value = 2 }),
        call("add", "o5", 0, 5, "ok", { n = 1 }, { count = 1 }),
        call("add", "o6", 6, 9, "fail", { n = 1 }, nil, "stale_owner"),
        call("add", "o7", 10, 90, "unknown", { n = 1 }),
        call("seq_tell", "o8", 0, 1, "ok", { sender = "c1", n = 1 }),
        { kind = "seq_seen", type = "Seq", id = "s1",
          value = { c1 = { 1, 2, 3 }, c2 = { 1, 5 } } },
        { kind = "seq_report", type = "Seq", id = "s1",
          value = { reorders = 0, gaps = 1 } },
        { kind = "activation", type = "Seq", id = "s1", node = "n1",
          start = 0, ["end"] = 50 },
        { kind = "activation", type = "Seq", id = "s1", node = "n2",
          start = 40, ["end"] = 100 },
        { kind = "fault", fault = "partition", start = 35, ["end"] = 55 },
    }
    for _, c in ipairs(history) do
        if c.kind == "add" then c.type, c.id = "Tally", "t1" end
    end
    local journal = {
        ev("r1", 1, 1, "o1"), ev("r1", 2, 2, "o2"),
        ev("t1", 1, 1, "o5", "Tally"), ev("t1", 2, 1, nil, "Tally"),
        { table = "operations", type = "Tally", id = "t1", op_id = "o5" },
    }
    return history, journal
end

describe("nemesis checker", function()
    it("passes a clean history", function()
        local report = checker.check(clean())
        assert.same({}, checks(report))
        assert.same({}, report.undecided)
        assert.is_true(report.ok)
        assert.equal(1, report.stats.registers)
    end)

    it("finds a lost acknowledged write", function()
        local history, journal = clean()
        table.remove(journal, 3) -- o5's event
        local report = checker.check(history, journal)
        assert.same({ "lost_write" }, checks(report))
        assert.equal("Tally/t1", report.violations[1].entity)
        assert.equal("o5", report.violations[1].evidence[1].op_id)
    end)

    it("finds an acknowledged CAS whose event is missing", function()
        local history, journal = clean()
        table.remove(journal, 2) -- o2's event
        assert.same({ "lost_write" }, checks(checker.check(history,
                                                           journal)))
    end)

    it("finds a stale write: an older epoch after a newer", function()
        local history, journal = clean()
        journal[#journal + 1] = ev("r1", 3, 1)
        local report = checker.check(history, journal)
        assert.same({ "single_writer" }, checks(report))
        assert.matches("epoch 1 at sequence 3 after epoch 2",
                       report.violations[1].message)
    end)

    it("finds epochs that interleave (A B A)", function()
        local report = checker.check({}, {
            ev("x", 1, 4), ev("x", 2, 5), ev("x", 3, 4), ev("x", 4, 5) })
        assert.same({ "single_writer" }, checks(report))
        assert.matches("interleaves", report.violations[1].message)
    end)

    it("finds a hole in an entity's sequence", function()
        local report = checker.check({}, { ev("x", 3, 1), ev("x", 5, 1) })
        assert.same({ "single_writer" }, checks(report))
    end)

    it("finds a reorder of one sender's messages", function()
        local history, journal = clean()
        history[9].value.c2 = { 1, 3, 2 }
        local report = checker.check(history, journal)
        assert.same({ "fifo" }, checks(report))
        assert.equal("Seq/s1", report.violations[1].entity)
        assert.same({ 3, 2 }, report.violations[1].evidence.around)
    end)

    it("finds a reorder the seqcheck entity counted", function()
        local history, journal = clean()
        history[10].value.reorders = 2
        assert.same({ "fifo" }, checks(checker.check(history, journal)))
    end)

    it("finds a double application of an op id", function()
        local history, journal = clean()
        journal[#journal + 1] = ev("t1", 3, 2, "o5", "Tally")
        local report = checker.check(history, journal)
        assert.same({ "double_application" }, checks(report))
        assert.matches("o5 applied twice", report.violations[1].message)
    end)

    it("counts the events of one multi-event op once", function()
        local journal = {
            { table = "events", type = "T", id = "x", sequence = 1,
              epoch = 1, payload = { op_id = "a", op_part = 1 } },
            { table = "events", type = "T", id = "x", sequence = 2,
              epoch = 1, payload = { op_id = "a", op_part = 2 } } }
        assert.is_true(checker.check({}, journal).ok)
    end)

    it("finds a write applied although its call was refused", function()
        local history, journal = clean()
        journal[#journal + 1] = ev("t1", 3, 1, "o6", "Tally")
        assert.same({ "refused_write_applied" },
                    checks(checker.check(history, journal)))
    end)

    it("finds two successful CAS from the same expected value", function()
        local history = { cas("a", 0, 10, 0, 1, true),
                          cas("b", 20, 30, 0, 2, true) }
        local journal = { ev("r1", 1, 1, "a"), ev("r1", 2, 1, "b") }
        local report = checker.check(history, journal, { initial = 0 })
        assert.same({ "linearizable_cas" }, checks(report))
        assert.equal("Reg/r1", report.violations[1].entity)
        assert.matches("^b cas", report.violations[1].evidence.blocked)
    end)

    it("finds a read of a value no write could have left", function()
        local history = { cas("a", 0, 10, nil, 1, true),
                          call("read", "b", 20, 30, "ok", {},
                               { value = 7 }) }
        local report = checker.check(history, { ev("r1", 1, 1, "a") })
        assert.same({ "linearizable_cas" }, checks(report))
    end)

    it("finds a refused CAS that expected the only value", function()
        -- the register held 1 for the whole window of b, which says it
        -- did not hold 1
        local history = { cas("a", 0, 10, nil, 1, true),
                          cas("b", 20, 30, 1, 5, false) }
        local report = checker.check(history, { ev("r1", 1, 1, "a") })
        assert.same({ "linearizable_cas" }, checks(report))
    end)

    it("passes concurrent overlapping CAS in either order", function()
        -- b and c overlap; only the order c, b explains the read
        local history = {
            cas("a", 0, 5, nil, 1, true),
            cas("b", 10, 40, 3, 2, true),
            cas("c", 12, 30, 1, 3, true),
            call("read", "d", 50, 60, "ok", {}, { value = 2 }),
        }
        local journal = { ev("r1", 1, 1, "a"), ev("r1", 2, 1, "c"),
                          ev("r1", 3, 1, "b") }
        local report = checker.check(history, journal)
        assert.same({}, checks(report))
        assert.is_true(report.ok)
    end)

    it("passes a read explained only by an unknown CAS", function()
        local history = {
            cas("a", 0, 5, nil, 1, true),
            cas("b", 10, nil, 1, 9, nil, "unknown"),
            call("read", "c", 100, 110, "ok", {}, { value = 9 }),
            call("read", "d", 120, 130, "ok", {}, { value = 9 }),
        }
        -- from the client history alone
        local report = checker.check(history, {},
                                     { journal_order = false })
        assert.same({ "lost_write" }, checks(report)) -- no journal given
        -- the journal says b took effect
        local journal = { ev("r1", 1, 1, "a"), ev("r1", 2, 1, "b") }
        assert.is_true(checker.check(history, journal).ok)
        -- the journal says b never did: nothing explains the reads
        assert.same({ "linearizable_cas" },
                    checks(checker.check(history, { ev("r1", 1, 1, "a") })))
    end)

    it("passes an unknown CAS that never took effect", function()
        local history = {
            cas("a", 0, 5, nil, 1, true),
            cas("b", 10, nil, 1, 9, nil, "unknown"),
            call("read", "c", 100, 110, "ok", {}, { value = 1 }),
        }
        assert.is_true(checker.check(history, { ev("r1", 1, 1, "a") }).ok)
    end)

    it("treats an ambiguous error as unknown, a refusal as none", function()
        local base = {
            cas("a", 0, 5, nil, 1, true),
            call("cas", "b", 10, 20, "fail", { expect = 1, value = 9 },
                 nil, "timeout"),
            call("read", "c", 100, 110, "ok", {}, { value = 9 }),
        }
        local pure = { journal_order = false }
        assert.is_true(checker.check(base, { ev("r1", 1, 1, "a") },
                                     pure).ok)
        base[2].error = "stale_owner"
        assert.same({ "linearizable_cas" },
                    checks(checker.check(base, { ev("r1", 1, 1, "a") },
                                         pure)))
    end)

    it("places an unknown CAS the journal holds after its start", function()
        -- b's event is in the journal, so b took effect: the read of 1
        -- after b's start but before any later write is then a violation
        -- only if b must precede it; it need not, so this passes, and a
        -- second read of 1 after a read of 9 does not
        local history = {
            cas("a", 0, 5, nil, 1, true),
            cas("b", 10, nil, 1, 9, nil, "unknown"),
            call("read", "c", 20, 30, "ok", {}, { value = 1 }),
            call("read", "d", 40, 50, "ok", {}, { value = 9 }),
        }
        local journal = { ev("r1", 1, 1, "a"), ev("r1", 2, 1, "b") }
        assert.is_true(checker.check(history, journal).ok)
        history[#history + 1] = call("read", "e", 60, 70, "ok", {},
                                     { value = 1 })
        assert.same({ "linearizable_cas" },
                    checks(checker.check(history, journal)))
    end)

    it("reports undecided, not a pass, when the bound is hit", function()
        local history, journal = {}, {}
        for i = 1, 12 do
            -- twelve concurrent writes, then a read no order explains
            history[i] = call("write", "w" .. i, 0, 100, "ok",
                              { value = i })
            journal[i] = ev("r1", i, 1, "w" .. i)
        end
        history[13] = call("read", "r", 200, 210, "ok", {},
                           { value = 99 })
        local report = checker.check(history, journal, { max_steps = 50 })
        assert.is_false(report.ok)
        assert.same({}, report.violations)
        assert.equal(1, #report.undecided)
        assert.matches("search bound of 50 steps",
                       report.undecided[1].message)
        -- with room to search, the same history is refuted
        assert.same({ "linearizable_cas" },
                    checks(checker.check(history, journal)))
    end)

    it("finds two activations at once outside any fault", function()
        local history, journal = clean()
        history[#history] = nil -- the fault that covered the overlap
        local report = checker.check(history, journal)
        assert.same({ "single_activation" }, checks(report))
        assert.matches("from 40 to 50", report.violations[1].message)
    end)

    it("takes settle_ms into the fault windows", function()
        local history, journal = clean()
        history[#history]["end"] = 47
        assert.same({ "single_activation" },
                    checks(checker.check(history, journal)))
        assert.is_true(checker.check(history, journal,
                                     { settle_ms = 5 }).ok)
    end)

    it("finds a failed call with an undocumented error code", function()
        local history, journal = clean()
        history[6].error = "oops"
        local report = checker.check(history, journal)
        assert.same({ "undocumented_error" }, checks(report))
        assert.matches("'oops'", report.violations[1].message)
        history[6].error = nil
        assert.same({ "undocumented_error" },
                    checks(checker.check(history, journal)))
        history[6].error = "oops"
        assert.is_true(checker.check(history, journal,
                                     { extra_codes = { "oops" } }).ok)
    end)

    it("knows every code of moonshard.error", function()
        local mine = {}
        for _, c in ipairs(checker.runtime_codes) do mine[c] = true end
        local theirs = {}
        for c in pairs(errors.codes) do theirs[c] = true end
        assert.same(theirs, mine)
    end)

    it("names the record of a malformed input", function()
        local history = { call("cas", "a", 0, 5, "maybe", {}, {}) }
        history[1]._line = 7
        assert.has_error(function() checker.check(history, {}) end,
            "history record at line 7: 'outcome' must be ok, fail or "
            .. "unknown")
        local other = { cas("a", 0, 5, nil, 1, true),
                        cas("a", 6, 9, 1, 2, true) }
        assert.has_error(function() checker.check(other, {}) end)
    end)

    it("refuses a sequence record with a number that is no number",
       function()
        local history = { { kind = "seq_seen", type = "Seq", id = "s",
                            value = { c1 = { 1, "2" } }, _line = 3 } }
        assert.has_error(function() checker.check(history, {}) end,
            "history record at line 3: value.c1 must be a list of numbers")
    end)

    it("exits 0 on a clean run, 1 on a violation, 2 on bad input",
       function()
        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir -p " .. dir) == 0)
        local function write(name, lines)
            local f = assert(io.open(dir .. "/" .. name, "w"))
            f:write(table.concat(lines, "\n"), "\n")
            f:close()
            return dir .. "/" .. name
        end
        local function run(...)
            local p = io.popen("nemesis/check " .. table.concat({ ... },
                               " ") .. " 2>&1; echo \"rc=$?\"")
            local out = p:read("*a")
            p:close()
            return tonumber(out:match("rc=(%d+)%s*$")), out
        end
        local h = write("h.jsonl", {
            '{"client":"c","op_id":"a","kind":"add","type":"T","id":"x",'
            .. '"start":0,"end":1,"outcome":"ok","value":{}}' })
        local j = write("j.jsonl", {
            '{"table":"events","type":"T","id":"x","sequence":1,'
            .. '"epoch":1,"payload":"{\\"op_id\\":\\"a\\"}"}' })
        local empty = write("e.jsonl", {})
        local bad_file = write("b.jsonl", { "{", "" })
        local rc, out = run(h, j)
        assert.equal(0, rc, out)
        assert.matches("^OK: 1 calls", out)
        rc, out = run(h, empty)
        assert.equal(1, rc, out)
        assert.matches("VIOLATION lost_write T/x", out, 1, true)
        rc, out = run(bad_file)
        assert.equal(2, rc, out)
        assert.matches("b.jsonl:1:", out, 1, true)
        rc = run("--max-steps", "x", h)
        assert.equal(2, rc)
        os.execute("rm -r " .. dir)
    end)

    it("takes the retries of one op id as one operation", function()
        -- a timed out, its retry got the stored reply: one write
        local history = {
            call("cas", "a", 0, 50, "fail", { expect = 0, value = 1 },
                 nil, "timeout"),
            cas("b", 10, 20, 0, 2, false),
            cas("a", 60, 70, 0, 1, true),
            call("read", "c", 80, 90, "ok", {}, { value = 1 }),
        }
        local journal = { ev("r1", 1, 1, "a") }
        local report = checker.check(history, journal, { initial = 0 })
        assert.same({}, checks(report))
        assert.equal(3, report.stats.operations_called)
        -- b saw the register at 1 before a's first attempt began: the
        -- retry's window does not stretch back before the first start
        history[2].start, history[2]["end"] = -20, -10
        history[2].value.current = 1
        assert.same({ "linearizable_cas" },
                    checks(checker.check(history, journal,
                                         { initial = 0 })))
    end)

    it("finds a retried write that landed twice", function()
        local history = {
            call("add", "a", 0, 50, "unknown", { n = 1 }),
            call("add", "a", 60, 70, "ok", { n = 1 }, { count = 1 }),
        }
        local journal = { ev("r1", 1, 1, "a"), ev("r1", 2, 1, "a") }
        assert.same({ "double_application" },
                    checks(checker.check(history, journal)))
    end)

    it("takes the journal's order of a register's writes", function()
        -- b and c overlap and either order fits the replies; the
        -- journal says c came first, so the read of c's value is stale
        local history = {
            call("write", "b", 0, 20, "ok", { value = 1 }),
            call("write", "c", 5, 25, "ok", { value = 2 }),
            call("read", "d", 30, 40, "ok", {}, { value = 2 }),
        }
        local journal = { ev("r1", 1, 1, "c"), ev("r1", 2, 1, "b") }
        assert.same({ "linearizable_cas" },
                    checks(checker.check(history, journal)))
        assert.is_true(checker.check(history, journal,
                                     { journal_order = false }).ok)
        journal[1].payload, journal[2].payload = journal[2].payload,
                                                 journal[1].payload
        assert.is_true(checker.check(history, journal).ok)
    end)

    it("keys its cache on 64 independent bits per call", function()
        -- the rank over GF(2) of the first 100 calls' two words: 64 when
        -- no subset of up to 64 calls has the key of another subset
        -- (from one generator the second word was a function of the
        -- first: rank 32, and 33 calls always held a colliding subset)
        local bit = require "bit"
        local band, bxor, lshift = bit.band, bit.bxor, bit.lshift
        local z1, z2 = checker.zobrist(100)
        local rows = {}
        for i = 1, 100 do rows[i] = { z1[i], z2[i] } end
        local r = 0
        for col = 0, 63 do
            local w, m = col < 32 and 1 or 2, lshift(1, col % 32)
            local piv
            for i = r + 1, #rows do
                if band(rows[i][w], m) ~= 0 then piv = i break end
            end
            if piv then
                r = r + 1
                rows[r], rows[piv] = rows[piv], rows[r]
                for i = 1, #rows do
                    if i ~= r and band(rows[i][w], m) ~= 0 then
                        rows[i][1] = bxor(rows[i][1], rows[r][1])
                        rows[i][2] = bxor(rows[i][2], rows[r][2])
                    end
                end
            end
        end
        assert.equal(64, r)
    end)

    it("agrees with a brute-force search on small histories", function()
        -- every order of every subset of the unknown calls, against the
        -- checker's search, on 1,200 seeded random histories of 1 to 6
        -- calls over the values 0..2 (windows touch often), half of them
        -- with a random journal of some of their writes
        local rank -- op id -> place in the journal
        local function legal(order)
            local state, last = 0, 0
            for _, c in ipairs(order) do
                local a, v = c.args, c.value
                local k = rank[c.op_id]
                if k then
                    if k ~= last + 1 then return false end
                    last = k
                end
                if c.kind == "read" then
                    if v.value ~= state then return false end
                elseif c.kind == "write" then
                    state = a.value
                elseif c.outcome == "unknown" and k then
                    if state ~= a.expect then return false end
                    state = a.value
                elseif c.outcome == "unknown" then
                    if state == a.expect then state = a.value end
                elseif v.ok then
                    if state ~= a.expect then return false end
                    state = a.value
                elseif state == a.expect then
                    return false
                end
            end
            return true
        end
        local function before(x, y)
            return x["end"] ~= nil and x["end"] < y.start
        end
        local function permute(list, n)
            if n <= 1 then
                for i = 1, #list do
                    for j = i + 1, #list do
                        if before(list[j], list[i]) then return false end
                    end
                end
                return legal(list)
            end
            for i = 1, n do
                list[i], list[n] = list[n], list[i]
                if permute(list, n - 1) then
                    list[i], list[n] = list[n], list[i]
                    return true
                end
                list[i], list[n] = list[n], list[i]
            end
            return false
        end
        local function brute(hist)
            local definite, unknown = {}, {}
            local covered = next(rank) ~= nil
            for _, c in ipairs(hist) do
                if c.outcome ~= "unknown" or rank[c.op_id] then
                    definite[#definite + 1] = c
                elseif not covered then
                    unknown[#unknown + 1] = c
                end
            end
            for mask = 0, 2 ^ #unknown - 1 do
                local list = {}
                for _, c in ipairs(definite) do list[#list + 1] = c end
                for i, c in ipairs(unknown) do
                    if math.floor(mask / 2 ^ (i - 1)) % 2 == 1 then
                        list[#list + 1] = c
                    end
                end
                if permute(list, #list) then return true end
            end
            return false
        end
        math.randomseed(13)
        local r = math.random
        local found = { [true] = 0, [false] = 0 }
        for h = 1, 1200 do
            local hist = {}
            for i = 1, r(1, 6) do
                local s = r(0, 10)
                local e = s + r(0, 5)
                local op = "h" .. h .. "-" .. i
                local k = r(1, 3)
                local c
                if k == 1 then
                    c = call("read", op, s, e, "ok", {},
                             { value = r(0, 2) })
                elseif k == 2 then
                    c = call("write", op, s, e, "ok", { value = r(0, 2) })
                else
                    c = cas(op, s, e, r(0, 2), r(0, 2), r() < 0.5)
                end
                if k ~= 1 and r() < 0.25 then
                    c.outcome, c["end"], c.value = "unknown", nil, nil
                end
                hist[i] = c
            end
            -- the journal: some writes that may have landed, shuffled
            rank = {}
            local journal = {}
            if h % 2 == 0 then
                for _, c in ipairs(hist) do
                    local refused = c.kind == "cas" and c.value
                                    and not c.value.ok
                    if c.kind ~= "read" and not refused and r() < 0.7 then
                        journal[#journal + 1] = c.op_id
                    end
                end
                for i = #journal, 2, -1 do
                    local j = r(1, i)
                    journal[i], journal[j] = journal[j], journal[i]
                end
                for i, op in ipairs(journal) do
                    rank[op] = i
                    journal[i] = ev("r1", i, 1, op)
                end
            end
            local expect = brute(hist)
            local report = checker.check(hist, journal, { initial = 0 })
            local lin = true
            for _, v in ipairs(report.violations) do
                if v.check == "linearizable_cas" then lin = false end
            end
            if lin ~= expect then
                error("history " .. h .. ": brute force says "
                      .. tostring(expect) .. ", the checker "
                      .. tostring(lin))
            end
            found[expect] = found[expect] + 1
        end
        -- both verdicts were exercised
        assert.is_true(found[true] > 50 and found[false] > 50)
    end)

    it("checks 10,000 calls over 100 registers", function()
        -- correctness at scale (the speed is measured by a command in
        -- nemesis/README.md, not here)
        local history, journal, t = {}, {}, 0
        for k = 1, 100 do
            local v = 0
            for i = 1, 100 do
                local op = "k" .. k .. "-" .. i
                local c = cas(op, t, t + 15, v, i, true)
                c.id = "r" .. k
                history[#history + 1] = c
                journal[#journal + 1] = ev("r" .. k, i, 1, op)
                v = i
                t = t + 10 -- each call overlaps the next
            end
        end
        local report = checker.check(history, journal, { initial = 0 })
        assert.is_true(report.ok)
        assert.equal(100, report.stats.registers)
    end)
end)

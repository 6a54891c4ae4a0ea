-- spec/01-unit/account_spec.lua: the event-sourced account (entities/
-- account.lua). command and apply are pure, so they are called directly:
-- `run` does what the runtime does with one command (command, then the
-- events applied in order, then the reply), each value copied as it
-- crosses (the runtime's JSON keeps numbers exact, DESIGN G9; cjson here
-- only checks that a value can be encoded: it rounds to 14 digits).
local cjson = require "cjson"
local account = require "account"

local function copy(v)
    if type(v) ~= "table" then
        return v
    end
    cjson.encode(v)
    local t = {}
    for k, x in pairs(v) do
        t[k] = copy(x)
    end
    return t
end

local function ctx()
    local c = { replies = {} }
    function c.reply(self, v)
        assert(#self.replies == 0, "a second reply")
        self.replies[#self.replies + 1] = copy(v)
    end
    return c
end

-- Runs one command on `state`; returns the new state, the events written
-- and the reply.
local function run(state, cmd)
    local c = ctx()
    local events = account.command(state, copy(cmd), c) or {}
    for _, ev in ipairs(events) do
        state = account.apply(state, copy(ev)) or state
    end
    return state, copy(events), c.replies[1]
end

-- A state rebuilt from a journal alone, as recovery does.
local function replay(journal)
    local s = account.init()
    for _, ev in ipairs(journal) do
        s = account.apply(s, copy(ev)) or s
    end
    return s
end

describe("entities/account", function()
    local s, ev, r, _

    before_each(function()
        s = account.init()
        s, ev, r = run(s, { type = "open", owner = "ada" })
    end)

    it("opens with an owner and a zero balance", function()
        assert.same({ { type = "opened", owner = "ada" } }, ev)
        assert.same({ ok = true, owner = "ada", balance = 0 }, r)
        _, ev, r = run(s, { type = "balance" })
        assert.same({}, ev)
        assert.same({ owner = "ada", balance = 0 }, r)
    end)

    it("refuses a second open and writes nothing", function()
        _, ev, r = run(s, { type = "open", owner = "bob" })
        assert.same({}, ev)
        assert.equal(false, r.ok)
        assert.equal("already_open", r.error)
        assert.equal("ada", s.owner)
    end)

    it("deposits and withdraws cents, replying the new balance", function()
        s, ev, r = run(s, { type = "deposit", amount = 1250 })
        assert.same({ { type = "deposited", amount = 1250 } }, ev)
        assert.same({ ok = true, balance = 1250 }, r)
        s, ev, r = run(s, { type = "withdraw", amount = 250 })
        assert.same({ { type = "withdrawn", amount = 250 } }, ev)
        assert.same({ ok = true, balance = 1000 }, r)
        _, _, r = run(s, { type = "balance" })
        assert.same({ owner = "ada", balance = 1000 }, r)
    end)

    it("refuses a withdrawal above the balance with a clear error",
       function()
        s = run(s, { type = "deposit", amount = 500 })
        local s2
        s2, ev, r = run(s, { type = "withdraw", amount = 501 })
        assert.same({}, ev)
        assert.same({ ok = false, error = "insufficient_funds",
                      message = "cannot withdraw 501 cents: the balance "
                                .. "is 500",
                      balance = 500, amount = 501 }, r)
        assert.equal(500, s2.balance)
        -- the whole balance may go
        s, _, r = run(s, { type = "withdraw", amount = 500 })
        assert.same({ ok = true, balance = 0 }, r)
    end)

    it("refuses money moves and balance on an account not open", function()
        local fresh = account.init()
        for _, cmd in ipairs({ { type = "deposit", amount = 1 },
                               { type = "withdraw", amount = 1 },
                               { type = "balance" } }) do
            local _, e, rep = run(fresh, cmd)
            assert.same({}, e)
            assert.equal("not_open", rep.error, cmd.type)
        end
    end)

    it("raises on amounts that are not whole cents in range", function()
        for _, a in ipairs({ 0, -5, 1.5, 0.1, account.MAX_CENTS + 2,
                             1 / 0, "10" }) do
            for _, t in ipairs({ "deposit", "withdraw" }) do
                assert.has_error(function()
                    account.command(s, { type = t, amount = a }, ctx())
                end)
            end
        end
        local ok, err = pcall(account.command, s,
                              { type = "deposit", amount = 1.5 }, ctx())
        assert.is_false(ok)
        assert.matches("deposit: 'amount' must be a whole number of cents "
                       .. "in 1..9007199254740991, got 1.5", err, 1, true)
    end)

    it("refuses a deposit that would pass 2^53 - 1 cents", function()
        s = run(s, { type = "deposit", amount = account.MAX_CENTS })
        _, ev, r = run(s, { type = "deposit", amount = 1 })
        assert.same({}, ev)
        assert.equal("balance_limit", r.error)
        assert.equal(account.MAX_CENTS, s.balance)
    end)

    it("raises on a bad owner and an unknown command", function()
        local fresh = account.init()
        for _, o in ipairs({ "", 7, ("x"):rep(account.MAX_OWNER + 1) }) do
            assert.has_error(function()
                account.command(fresh, { type = "open", owner = o }, ctx())
            end)
        end
        assert.has_error(function()
            account.command(s, { type = "steal" }, ctx())
        end, "unknown command type: steal")
        assert.has_error(function()
            account.apply(s, { type = "nope" })
        end, "unknown event type: nope")
    end)

    it("rebuilds the same state from its journal alone", function()
        local journal = { { type = "opened", owner = "ada" } }
        for _, cmd in ipairs({ { type = "deposit", amount = 10000 },
                               { type = "withdraw", amount = 2501 },
                               { type = "withdraw", amount = 99999 },
                               { type = "deposit", amount = 1 } }) do
            s, ev = run(s, cmd)
            for _, e in ipairs(ev) do journal[#journal + 1] = e end
        end
        assert.equal(4, #journal) -- opened, 3 moves: one withdrawal refused
        assert.same(copy(s), copy(replay(journal)))
        assert.equal(7500, replay(journal).balance)
    end)
end)

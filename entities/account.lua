-- entities/account.lua: an event-sourced bank account (persistence =
-- "events"; the entity id is the account number). Amounts are integers of
-- cents, so a balance is exact: never a fraction, never above 2^53 - 1.
--
-- command(state, cmd, ctx) decides and returns the events to write (none
-- for a refusal or a query); apply(state, event) folds one event into the
-- state. Both are pure: the runtime writes the events, applies them, and
-- only then sends the reply given with ctx:reply (after the commit).
--
-- Commands:
--   open {owner}        reply {ok = true, owner, balance = 0}
--   deposit {amount}    reply {ok = true, balance}
--   withdraw {amount}   reply {ok = true, balance}, or, when the balance is
--                       short, {ok = false, error = "insufficient_funds",
--                       message, balance, amount} and nothing is written
--   balance             reply {owner, balance} (no event)
-- deposit, withdraw and balance on an account never opened, and a second
-- open, reply {ok = false, error = "not_open" | "already_open", message}.
-- A malformed command (unknown type, an amount that is not a whole number
-- of cents in 1..MAX_CENTS, an owner that is not a non-empty string of at
-- most 200 bytes) raises an error: the ask gets it, nothing is written.
--
-- Events: {type = "opened", owner}, {type = "deposited", amount},
-- {type = "withdrawn", amount}.

local type = type
local error = error
local tostring = tostring
local floor = math.floor
local format = string.format

local M = {}

-- the largest amount and balance: above 2^53 - 1 a double skips integers
M.MAX_CENTS = 9007199254740991
M.MAX_OWNER = 200

function M.init()
    return { balance = 0 }
end

local function amount_of(cmd)
    local a = cmd.amount
    if type(a) ~= "number" or a ~= a or floor(a) ~= a or a < 1
       or a > M.MAX_CENTS then
        error(format("%s: 'amount' must be a whole number of cents in "
                     .. "1..%d, got %s", cmd.type, M.MAX_CENTS,
                     type(a) == "number" and format("%.17g", a) or type(a)))
    end
    return a
end

local function refuse(ctx, code, message, extra)
    local r = extra or {}
    r.ok, r.error, r.message = false, code, message
    ctx:reply(r)
end

function M.command(state, cmd, ctx)
    local t = type(cmd) == "table" and cmd.type or nil
    if t == "open" then
        local owner = cmd.owner
        if type(owner) ~= "string" or owner == ""
           or #owner > M.MAX_OWNER then
            error(format("open: 'owner' must be a non-empty string of at "
                         .. "most %d bytes", M.MAX_OWNER))
        end
        if state.owner ~= nil then
            return refuse(ctx, "already_open", "the account is already "
                          .. "open (owner " .. state.owner .. ")")
        end
        ctx:reply({ ok = true, owner = owner, balance = 0 })
        return { { type = "opened", owner = owner } }
    elseif t == "deposit" or t == "withdraw" then
        local amount = amount_of(cmd)
        if state.owner == nil then
            return refuse(ctx, "not_open", "the account is not open: send "
                          .. "{\"type\":\"open\",\"owner\":...} first")
        end
        if t == "deposit" then
            local after = state.balance + amount
            if after > M.MAX_CENTS then
                return refuse(ctx, "balance_limit", format("the balance "
                              .. "would exceed %d cents", M.MAX_CENTS),
                              { balance = state.balance, amount = amount })
            end
            ctx:reply({ ok = true, balance = after })
            return { { type = "deposited", amount = amount } }
        end
        if amount > state.balance then
            return refuse(ctx, "insufficient_funds", format("cannot "
                          .. "withdraw %d cents: the balance is %d",
                          amount, state.balance),
                          { balance = state.balance, amount = amount })
        end
        ctx:reply({ ok = true, balance = state.balance - amount })
        return { { type = "withdrawn", amount = amount } }
    elseif t == "balance" then
        if state.owner == nil then
            return refuse(ctx, "not_open", "the account is not open")
        end
        ctx:reply({ owner = state.owner, balance = state.balance })
        return nil
    end
    error("unknown command type: " .. tostring(t))
end

function M.apply(state, event)
    local t = event.type
    if t == "opened" then
        state.owner = event.owner
    elseif t == "deposited" then
        state.balance = state.balance + event.amount
    elseif t == "withdrawn" then
        state.balance = state.balance - event.amount
    else
        error("unknown event type: " .. tostring(t))
    end
    return state
end

return M

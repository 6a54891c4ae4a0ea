-- entities/order.lua: an order that reserves stock, waits for payment and
-- ships (the entity id is the order id).
--
--   new --place--> reserved --pay--> paid --ship--> shipped
--    |               |  \
--    |               |   `--payment_timeout timer--> expired
--    |               `--cancel--> cancelled
--    |--cancel--> cancelled
--    `--place (some SKU refused or failed)--> rejected
--
-- `place` asks each Inventory SKU to reserve (2 s ask timeout each, one at
-- a time, so the order entity is suspended meanwhile and sees no other
-- message). When one refuses or fails, the order releases, by tell, every
-- SKU it reserved, and also the SKU whose ask failed: a timed-out reserve
-- may still have happened, and releasing an order that holds nothing is a
-- no-op in Inventory. Tells from one sender arrive in order (G2), so a
-- release never overtakes its reserve.
--
-- Messages:
--   place {items = {{sku, qty}, ...}, payment_timeout = seconds (30)}
--       reply {ok = true, state = "reserved"}, or
--             {ok = false, state = "rejected", reason, sku, available?}
--   pay {amount}       reserved -> paid; cancels the payment timer and tells
--                      each SKU to commit
--   ship               paid -> shipped
--   cancel             new|reserved -> cancelled (releases reservations)
--   payment_timeout    (timer) reserved -> expired (releases reservations);
--                      ignored in any other state
--   get                reply {id, state, items, history, reason?, amount?}
-- A message that is not valid in the current state replies
-- {ok = false, state = current, reason = "invalid transition: ..."}.
-- Malformed messages raise an error.

local type = type
local error = error
local ipairs = ipairs
local floor = math.floor
local huge = math.huge
local tostring = tostring
local format = string.format

local INVENTORY = "Inventory"
local RESERVE_TIMEOUT = 2
local DEFAULT_PAYMENT_TIMEOUT = 30

local M = {}

-- A finite number > 0 (false for NaN).
local function is_positive(x)
    return type(x) == "number" and x > 0 and x < huge
end

local function enter(state, to, ctx)
    state.state = to
    local history = state.history
    history[#history + 1] = { state = to, at = ctx:now() }
end

local function invalid(state, msg, ctx)
    ctx:reply({
        ok = false,
        state = state.state,
        reason = format("invalid transition: %s in state %s",
                        tostring(msg.type), state.state),
    })
end

local function tell_each(skus, msg, ctx)
    for _, sku in ipairs(skus) do
        local ok, err = ctx:ref(INVENTORY, sku):tell(msg)
        if not ok then
            ctx:log("warn", msg.type, "to", INVENTORY, sku, "failed:",
                    tostring(err))
        end
    end
end

local function skus_of(items)
    local skus = {}
    for i, item in ipairs(items) do
        skus[i] = item.sku
    end
    return skus
end

-- Validates place's items and merges repeated SKUs, keeping first order.
local function check_items(items)
    if type(items) ~= "table" or #items == 0 then
        error("place: 'items' must be a non-empty list of {sku, qty}")
    end
    local merged, index = {}, {}
    for i, item in ipairs(items) do
        local sku = type(item) == "table" and item.sku
        local qty = type(item) == "table" and item.qty
        if type(sku) ~= "string" or sku == "" then
            error(format("place: items[%d].sku must be a non-empty string", i))
        end
        if not is_positive(qty) or qty ~= floor(qty) then
            error(format("place: items[%d].qty must be a positive integer", i))
        end
        local at = index[sku]
        if at then
            merged[at].qty = merged[at].qty + qty
        else
            merged[#merged + 1] = { sku = sku, qty = qty }
            index[sku] = #merged
        end
    end
    return merged
end

local function place(state, msg, ctx)
    local items = check_items(msg.items)
    local timeout = msg.payment_timeout
    if timeout == nil then
        timeout = DEFAULT_PAYMENT_TIMEOUT
    elseif not is_positive(timeout) then
        error("place: 'payment_timeout' must be a positive number of seconds")
    end

    local held = {}
    for _, item in ipairs(items) do
        local reply, err = ctx:ref(INVENTORY, item.sku):ask(
            { type = "reserve", order = ctx.id, qty = item.qty },
            RESERVE_TIMEOUT)
        if not (reply and reply.ok == true) then
            local rejection = { ok = false, state = "rejected", sku = item.sku }
            if reply then
                rejection.reason = reply.reason or "refused"
                rejection.available = reply.available
            else
                -- The reserve may have happened anyway: release it too.
                held[#held + 1] = item.sku
                rejection.reason = type(err) == "table" and err.code
                    or tostring(err)
            end
            tell_each(held, { type = "release", order = ctx.id }, ctx)
            state.items = items
            state.reason = rejection.reason
            enter(state, "rejected", ctx)
            ctx:reply(rejection)
            return
        end
        held[#held + 1] = item.sku
    end

    state.items = items
    state.payment_timer = ctx:after(timeout, { type = "payment_timeout" })
    enter(state, "reserved", ctx)
    ctx:reply({ ok = true, state = "reserved" })
end

-- Leaves "reserved" without payment: stop the timer, give the stock back.
local function release_all(state, to, reason, ctx)
    if state.payment_timer then
        ctx:cancel(state.payment_timer)
        state.payment_timer = nil
    end
    tell_each(skus_of(state.items), { type = "release", order = ctx.id }, ctx)
    state.reason = reason
    enter(state, to, ctx)
end

function M.init(ctx)
    return {
        state = "new",
        items = {},
        history = { { state = "new", at = ctx:now() } },
    }
end

function M.receive(state, msg, ctx)
    local t = msg.type
    local current = state.state
    if t == "get" then
        ctx:reply({
            id = ctx.id,
            state = current,
            items = state.items,
            history = state.history,
            reason = state.reason,
            amount = state.amount,
        })
    elseif t == "place" then
        if current ~= "new" then
            return invalid(state, msg, ctx)
        end
        place(state, msg, ctx)
    elseif t == "pay" then
        if current ~= "reserved" then
            return invalid(state, msg, ctx)
        end
        local amount = msg.amount
        if not is_positive(amount) then
            error("pay: 'amount' must be a positive number")
        end
        if state.payment_timer then
            ctx:cancel(state.payment_timer)
            state.payment_timer = nil
        end
        state.amount = amount
        tell_each(skus_of(state.items), { type = "commit", order = ctx.id },
                  ctx)
        enter(state, "paid", ctx)
        ctx:reply({ ok = true, state = "paid" })
    elseif t == "ship" then
        if current ~= "paid" then
            return invalid(state, msg, ctx)
        end
        enter(state, "shipped", ctx)
        ctx:reply({ ok = true, state = "shipped" })
    elseif t == "cancel" then
        if current == "new" then
            enter(state, "cancelled", ctx)
        elseif current == "reserved" then
            release_all(state, "cancelled", "cancelled", ctx)
        else
            return invalid(state, msg, ctx)
        end
        ctx:reply({ ok = true, state = "cancelled" })
    elseif t == "payment_timeout" then
        -- A timer that fired just before pay or cancel cancelled it can
        -- still arrive; only a still-reserved order expires.
        if current == "reserved" then
            release_all(state, "expired", "payment timeout", ctx)
        else
            ctx:log("debug", "stale payment_timeout in state", current)
        end
    else
        error("unknown message type: " .. tostring(t))
    end
end

return M

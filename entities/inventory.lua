-- entities/inventory.lua: stock of one SKU (the entity id is the SKU).
--
-- Units are either available, reserved by an order, or sold. Reservations
-- are keyed by order id, so every order operation is idempotent: a second
-- `reserve` from the same order sets its reservation to the new quantity
-- (a retried ask reserves nothing extra), and `release` of an order that
-- holds nothing is a no-op. This is what lets an order release a SKU whose
-- reserve ask timed out without knowing whether the reserve happened.
--
-- Messages (malformed ones raise an error):
--   restock {qty}          reply {ok = true, available = n}
--   reserve {order, qty}   reply {ok = true}, or
--                          {ok = false, reason = "insufficient", available = n}
--   release {order}        reply {ok = true, released = qty}  (0 if none)
--   commit  {order}        reply {ok = true, committed = qty}, or
--                          {ok = false, reason = "no reservation"}
--   get                    reply {sku, available, reserved, sold}

local type = type
local error = error
local floor = math.floor
local huge = math.huge
local tostring = tostring

local M = {}

function M.init()
    return { available = 0, reserved = 0, sold = 0, reservations = {} }
end

local function check_qty(msg)
    local qty = msg.qty
    if type(qty) ~= "number" or qty < 1 or qty ~= floor(qty)
        or qty == huge then
        error(msg.type .. ": 'qty' must be a positive integer, got "
              .. tostring(qty))
    end
    return qty
end

local function check_order(msg)
    local order = msg.order
    if type(order) ~= "string" or order == "" then
        error(msg.type .. ": 'order' must be a non-empty string, got "
              .. type(order))
    end
    return order
end

function M.receive(state, msg, ctx)
    local t = msg.type
    if t == "reserve" then
        local order = check_order(msg)
        local qty = check_qty(msg)
        local held = state.reservations[order] or 0
        local extra = qty - held
        if extra > state.available then
            ctx:reply({ ok = false, reason = "insufficient",
                        available = state.available })
            return
        end
        state.available = state.available - extra
        state.reserved = state.reserved + extra
        state.reservations[order] = qty
        ctx:reply({ ok = true })
    elseif t == "release" then
        local order = check_order(msg)
        local held = state.reservations[order] or 0
        state.reservations[order] = nil
        state.available = state.available + held
        state.reserved = state.reserved - held
        ctx:reply({ ok = true, released = held })
    elseif t == "commit" then
        local order = check_order(msg)
        local held = state.reservations[order]
        if not held then
            ctx:reply({ ok = false, reason = "no reservation" })
            return
        end
        state.reservations[order] = nil
        state.reserved = state.reserved - held
        state.sold = state.sold + held
        ctx:reply({ ok = true, committed = held })
    elseif t == "restock" then
        state.available = state.available + check_qty(msg)
        ctx:reply({ ok = true, available = state.available })
    elseif t == "get" then
        ctx:reply({ sku = ctx.id, available = state.available,
                    reserved = state.reserved, sold = state.sold })
    else
        error("unknown message type: " .. tostring(t))
    end
end

return M

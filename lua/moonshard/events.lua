-- moonshard.events: the config's on_member_event hook, as the node runs it
-- (runtime/lua/event_hook.c). The node hands each membership event over
-- as its JSON text (runtime/core/mbevent.h); the hook gets it as a table:
--
--   ev.seq, ev.kind, ev.time_ms, ev.node,
--   ev.member = { name=, address=, uid= (16 hex digits), roles={...},
--                 status=, self= },
--   ev.previous_status (member_* kinds), ev.previous (leader_changed and
--   coordinator_changed; nil when there was none, as ev.member is nil
--   when there is none now)
--
-- README "Membership events" documents the kinds.
local cjson = require "cjson"
local jit = require "jit"

local type = type
local getupvalue, getinfo = debug.getupvalue, debug.getinfo

local M = {}

local decoder = cjson.new()
local null = cjson.null

-- Turns the JIT off for Lua function `fn`, the functions it defines and,
-- recursively, the Lua functions in its upvalues (`seen`: those done).
local function jit_off(fn, seen)
    if seen[fn] or getinfo(fn, "S").what == "C" then
        return
    end
    seen[fn] = true
    jit.off(fn, true)
    local i = 1
    while true do
        local name, v = getupvalue(fn, i)
        if name == nil then
            return
        end
        if type(v) == "function" then
            jit_off(v, seen)
        end
        i = i + 1
    end
end

-- Called once with the config's hook: JIT compilation is turned off for
-- it, the functions it defines and the functions it reaches through its
-- upvalues (the config's local helpers it calls, and theirs), so that
-- the count hook of the call budget sees their loops (LuaJIT's compiled
-- code runs no hooks). Functions it reaches otherwise (a module's, a
-- global, a table's field) keep the JIT: the budget cannot stop them.
function M.prepare(hook)
    if type(hook) ~= "function" then
        error("bad 'hook' argument (function expected, got " .. type(hook)
              .. ")", 2)
    end
    jit_off(hook, {})
end

-- Decodes `json` and calls hook(ev).
function M.call(hook, json)
    local ev = decoder.decode(json)
    if ev.member == null then
        ev.member = nil
    end
    if ev.previous == null then
        ev.previous = nil
    end
    if ev.previous_status == null then
        ev.previous_status = nil
    end
    hook(ev)
end

return M

-- moonshard.reload: hot reload for development (`moonshard node --watch`).
--
-- The watcher (runtime/lua/watch.c) polls files and calls, through the
-- bridge, between two messages:
--
--   M.start(config_path) -> answer   which files to watch
--   M.poll(paths)        -> answer   reload the files that changed
--                                    (`paths`: one a line)
--
-- An answer is text, one item a line: "file\tPATH" for each file to watch
-- (the whole list every time) and "LEVEL\tTEXT" for each line to log.
--
-- Two kinds of files are watched:
--
-- * the behavior module of each entity type: a change loads the file
--   protected, checks its shape and swaps it in (moonshard.host's
--   swap_behavior): live entities keep their state and run the new code
--   from their next message, after its optional `migrate`;
-- * every other module that evaluating the cluster config script loads
--   from a file (moonshard.strategy.*, a user's own strategy): a change
--   evaluates the config script again, protected, with those modules
--   loaded anew, and hands each affected type's `allocation` and
--   `rebalance` to moonshard.alloc.swap (shape check, dry run on the latest
--   view, then swap). A type is affected when its new strategy objects
--   reach code from a changed file, or their ids changed.
--
-- Any failure keeps the old code and logs exactly one warn line
-- "reload: FILE: why"; each success logs one info line. The settings
-- fingerprint a node registered its types with (it includes the
-- allocation strategy's id) stays the one it started with.

local type, pairs, ipairs, next, tostring = type, pairs, ipairs, next, tostring
local pcall, loadfile, getmetatable = pcall, loadfile, getmetatable
local require = require
local format, gsub, sub, gmatch = string.format, string.gsub, string.sub,
    string.gmatch
local concat, sort = table.concat, table.sort
local getinfo, getupvalue = debug.getinfo, debug.getupvalue
local package = package
local G = _G

local M = {}

local config_path          -- the cluster config script, as the node got it
local behavior_files = {}  -- [path] = module name
local strategy_files = {}  -- [path] = module name
local strategy_modules = {} -- module names, sorted
local known_ids = {}       -- [type name] = { allocation id, rebalance id }

-- Modules of the runtime itself are never reloaded: they hold the node's
-- state. The strategy library is plain code and may be.
local function is_runtime(name)
    if name == "moonshard" or name == "moonshard.strategy" then
        return name == "moonshard"
    end
    return sub(name, 1, 10) == "moonshard."
        and sub(name, 1, 19) ~= "moonshard.strategy."
end

local function one_line(s)
    return (gsub(tostring(s), "[\r\n]+%s*", " "))
end

-- "reload: FILE: why", without repeating FILE when `why` starts with it
-- (Lua's syntax errors do: "FILE:3: unexpected symbol").
local function line(files, why)
    why = one_line(why)
    if #files == 1 and sub(why, 1, #files[1] + 1) == files[1] .. ":" then
        return "reload: " .. why
    end
    return "reload: " .. concat(files, ", ") .. ": " .. why
end

local function answer(logs)
    local out = {}
    local paths = {}
    for p in pairs(behavior_files) do paths[#paths + 1] = p end
    for p in pairs(strategy_files) do paths[#paths + 1] = p end
    sort(paths)
    for _, p in ipairs(paths) do out[#out + 1] = "file\t" .. p end
    for _, l in ipairs(logs) do out[#out + 1] = l[1] .. "\t" .. l[2] end
    return concat(out, "\n") .. "\n"
end

-------------------------------------------------------------------------------
-- Evaluating the config script with fresh modules

-- Runs the config script again through a fresh moonshard.config, with the
-- modules `fresh` taken out of package.loaded so they load anew, and
-- records every module required meanwhile. Returns the normalized config,
-- the names required (in order) and undo(), which puts package.loaded back
-- as it was; or nil and the reason, with package.loaded already put back.
-- The runtime keeps its own moonshard.config either way.
local function evaluate(fresh)
    local loaded = package.loaded
    local before = {}
    for k, v in pairs(loaded) do before[k] = v end
    local function undo()
        local added = {}
        for k in pairs(loaded) do
            if before[k] == nil then added[#added + 1] = k end
        end
        for _, k in ipairs(added) do loaded[k] = nil end
        for k, v in pairs(before) do loaded[k] = v end
    end
    for _, name in ipairs(fresh) do loaded[name] = nil end
    loaded["moonshard.config"] = nil
    local seen, order = {}, {}
    local real_require, saved_path = G.require, package.path
    G.require = function(name)
        if type(name) == "string" and not seen[name] then
            seen[name] = true
            order[#order + 1] = name
        end
        return real_require(name)
    end
    local ok, cfg, err = pcall(function()
        return real_require("moonshard.config").load(config_path)
    end)
    G.require, package.path = real_require, saved_path
    loaded["moonshard.config"] = before["moonshard.config"]
    if not ok or not cfg then
        undo()
        return nil, ok and err or cfg
    end
    return cfg, order, undo
end

-- The file module `name` loads from, or nil.
local function file_of(name)
    return package.searchpath(name, package.path)
end

-- The modules of `order` that count as strategy modules: loaded from a
-- file, not the runtime's, not a behavior.
local function strategy_set(order, behaviors)
    local names, files = {}, {}
    for _, name in ipairs(order) do
        local path = not is_runtime(name) and not behaviors[name]
            and file_of(name)
        if path then
            names[#names + 1] = name
            files[path] = name
        end
    end
    sort(names)
    return names, files
end

-- The source files of every Lua function reachable from `root` through
-- table keys and values, metatables and upvalues (not through _G or
-- package, which reach everything).
local MAX_VISITS = 100000

local function sources(root, files)
    local seen = { [G] = true, [package] = true, [package.loaded] = true }
    local stack, visits = { root }, 0
    while stack[1] ~= nil and visits < MAX_VISITS do
        local v = stack[#stack]
        stack[#stack] = nil
        if not seen[v] then
            seen[v] = true
            visits = visits + 1
            local tv = type(v)
            if tv == "table" then
                for k, x in next, v do
                    if type(k) == "table" or type(k) == "function" then
                        stack[#stack + 1] = k
                    end
                    if type(x) == "table" or type(x) == "function" then
                        stack[#stack + 1] = x
                    end
                end
                local mt = getmetatable(v)
                if type(mt) == "table" then stack[#stack + 1] = mt end
            elseif tv == "function" then
                local src = getinfo(v, "S").source
                if sub(src, 1, 1) == "@" then files[sub(src, 2)] = true end
                for i = 1, 255 do
                    local name, up = getupvalue(v, i)
                    if name == nil then break end
                    if type(up) == "table" or type(up) == "function" then
                        stack[#stack + 1] = up
                    end
                end
            end
        end
    end
    return files
end

-------------------------------------------------------------------------------
-- Reloading

local function warn(logs, files, why, keeps)
    logs[#logs + 1] = { "warn", line(files, why) .. "; the old " .. keeps
                        .. " stays" }
end

local function info(logs, text)
    logs[#logs + 1] = { "info", text }
end

local function reload_behavior(path, name, logs)
    local chunk, err = loadfile(path)
    if not chunk then
        return warn(logs, { path }, err, "code")
    end
    local ok, mod = pcall(chunk, name)
    if not ok then
        return warn(logs, { path }, mod, "code")
    end
    local types, version = require("moonshard.host").swap_behavior(name, mod)
    if not types then
        return warn(logs, { path }, version, "code")
    end
    package.loaded[name] = mod
    info(logs, format("reload: %s: behavior of %s replaced (version %s)",
                      path, concat(types, ", "), tostring(version)))
end

local function reconcile()
    local core = package.loaded["moonshard.core"]
    if type(core) == "table" and type(core.reconcile) == "function" then
        pcall(core.reconcile)
    end
end

-- The types whose strategies to swap after `changed` files changed.
local function affected(cfg, changed)
    local list = {}
    for _, e in ipairs(cfg.entity_list) do
        local ids = known_ids[e.name]
        if ids then
            local files = sources(e.rebalance, sources(e.allocation, {}))
            local hit = ids[1] ~= e.allocation_id or ids[2] ~= e.rebalance_id
            for _, p in ipairs(changed) do
                hit = hit or files[p] == true
            end
            if hit then list[#list + 1] = e end
        end
    end
    return list
end

local function reload_strategies(changed, logs)
    local cfg, order, undo = evaluate(strategy_modules)
    if not cfg then
        return warn(logs, changed, order, "strategy")
    end
    local behaviors = {}
    for _, name in pairs(behavior_files) do behaviors[name] = true end
    local types = affected(cfg, changed)
    if #types == 0 then
        undo()
        info(logs, line(changed, "no entity type's strategy uses it; "
                        .. "nothing replaced"))
        return
    end
    local alloc = require "moonshard.alloc"
    local swapped = 0
    for _, e in ipairs(types) do
        local ok, why = alloc.swap(e.name, e.allocation, e.rebalance)
        if ok then
            swapped = swapped + 1
            known_ids[e.name] = { e.allocation_id, e.rebalance_id }
            info(logs, line(changed, format("strategy of %s replaced (%s)",
                                             e.name, e.allocation_id)))
        else
            warn(logs, changed, format("strategy of %s: %s", e.name,
                                       tostring(why)), "strategy")
        end
    end
    if swapped == 0 then
        undo()
        return
    end
    -- keep the modules just loaded: the swapped strategies run their code
    strategy_modules, strategy_files = strategy_set(order, behaviors)
    reconcile()
end

-------------------------------------------------------------------------------
-- Entry points (called by watch.c through the bridge)

function M.start(path)
    config_path = path
    behavior_files, strategy_files, strategy_modules = {}, {}, {}
    local logs = {}
    -- first the config as it is now, for the types and their modules
    local cfg, err = evaluate({})
    if not cfg then
        warn(logs, { path }, err, "configuration")
        return answer(logs)
    end
    local behaviors = {}
    for _, e in ipairs(cfg.entity_list) do
        local file = file_of(e.module)
        if file then behavior_files[file] = e.module end
        behaviors[e.module] = true
        known_ids[e.name] = { e.allocation_id, e.rebalance_id }
    end
    -- then again with every candidate module loaded anew, to learn what
    -- the script loads, directly or not; the fresh copies are dropped
    local candidates = {}
    for name in pairs(package.loaded) do
        if type(name) == "string" and not is_runtime(name)
            and not behaviors[name] and file_of(name) then
            candidates[#candidates + 1] = name
        end
    end
    sort(candidates)
    local order, undo
    cfg, order, undo = evaluate(candidates)
    if not cfg then
        warn(logs, { path }, order, "configuration")
        return answer(logs)
    end
    undo()
    strategy_modules, strategy_files = strategy_set(order, behaviors)
    local n = 0
    for _ in pairs(behavior_files) do n = n + 1 end
    info(logs, format("reload: watching %d behavior and %d strategy module "
                      .. "files", n, #strategy_modules))
    return answer(logs)
end

function M.poll(paths)
    local logs = {}
    local changed = {}
    for p in gmatch(paths or "", "[^\n]+") do
        if behavior_files[p] then
            reload_behavior(p, behavior_files[p], logs)
        elseif strategy_files[p] then
            changed[#changed + 1] = p
        end
    end
    if changed[1] then
        sort(changed)
        reload_strategies(changed, logs)
    end
    return answer(logs)
end

-- For tests: the watched files by kind ("behavior" | "strategy").
function M.files()
    local out = { behavior = {}, strategy = {} }
    for p, name in pairs(behavior_files) do out.behavior[p] = name end
    for p, name in pairs(strategy_files) do out.strategy[p] = name end
    return out
end

return M

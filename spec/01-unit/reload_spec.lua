-- moonshard.reload without a node: which files it watches, and what a
-- change of each kind hands to the host and to moonshard.alloc (both
-- replaced here by recorders). The real swap, with live entities, is in
-- spec/03-integration/reload_spec.lua.

local function write(path, text)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
end

local function pin_source(target, id)
    return ([[
local M = {}
local methods = {}
local mt = { __index = methods }
function M.new() return setmetatable({ id = %q }, mt) end
function methods.allocate() return %q end
function methods.rebalance() return {} end
return M
]]):format(id or "pin", target)
end

local BEHAVIOR = [[
local M = {}
function M.receive() end
return M
]]

local CONFIG = [[
local pin = require "pin"
return {
    cluster = "unit",
    nodes = { { name = "n1", listen = "127.0.0.1:1", http = "127.0.0.1:2" } },
    entities = {
        Pinned = { module = "unitbeh", shard_count = 8, allocation = pin.new() },
        Plain = { module = "unitbeh", shard_count = 8 },
    },
}
]]

-- An answer of reload.start/poll: { files = {path = true}, logs = {{level,
-- text}} }.
local function parse(text)
    local out = { files = {}, logs = {} }
    for l in text:gmatch("[^\n]+") do
        local kind, value = l:match("^(%w+)\t(.*)$")
        if kind == "file" then
            out.files[value] = true
        else
            out.logs[#out.logs + 1] = { kind, value }
        end
    end
    return out
end

describe("moonshard.reload", function()
    local dir, config, pin, beh
    local reload, swaps, behavior_swaps
    local saved_path = package.path

    setup(function()
        dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir '" .. dir .. "'"))
        config, pin, beh = dir .. "/cluster.lua", dir .. "/pin.lua",
            dir .. "/unitbeh.lua"
        write(config, CONFIG)
        write(pin, pin_source("n1"))
        write(beh, BEHAVIOR)
        swaps, behavior_swaps = {}, {}
        package.loaded["moonshard.alloc"] = {
            swap = function(name, allocation, rebalance)
                swaps[#swaps + 1] = { name = name, id = allocation.id,
                                      same = allocation == rebalance }
                if allocation:allocate() == "nx" then
                    return nil, "dry run: unknown member 'nx'"
                end
                return true
            end,
        }
        package.loaded["moonshard.host"] = {
            swap_behavior = function(name, mod)
                if type(mod.receive) ~= "function" then
                    return nil, "the module has no receive function"
                end
                behavior_swaps[#behavior_swaps + 1] = { name = name,
                                                        mod = mod }
                return { "Pinned", "Plain" }, 2
            end,
        }
        -- as the node does at start: evaluate the config, load behaviors
        assert(require("moonshard.config").load(config))
        require "unitbeh"
        reload = require "moonshard.reload"
    end)

    teardown(function()
        package.path = saved_path
        os.execute("rm -rf '" .. dir .. "'")
    end)

    it("watches the behavior modules and every module the config script "
       .. "loads from a file", function()
        local a = parse(reload.start(config))
        assert.is_true(a.files[beh])
        assert.is_true(a.files[pin])
        assert.is_true(a.files["lua/moonshard/strategy/least_loaded.lua"])
        assert.is_true(a.files["lua/moonshard/strategy/util.lua"])
        assert.is_nil(a.files["lua/moonshard/config.lua"])
        assert.equal(1, #a.logs)
        assert.equal("info", a.logs[1][1])
        local files = reload.files()
        assert.equal("unitbeh", files.behavior[beh])
        assert.equal("pin", files.strategy[pin])
    end)

    it("keeps the old strategy and logs one warn line when the module "
       .. "does not load", function()
        local old = package.loaded.pin
        write(pin, "return {")
        local a = parse(reload.poll(pin .. "\n"))
        assert.equal(0, #swaps)
        assert.equal(1, #a.logs)
        assert.equal("warn", a.logs[1][1])
        assert.matches("^reload: " .. dir:gsub("%p", "%%%0") .. "/pin%.lua",
                       a.logs[1][2])
        assert.equal(old, package.loaded.pin)
    end)

    it("keeps the old strategy when alloc.swap refuses the new one",
       function()
        local old = package.loaded.pin
        write(pin, pin_source("nx"))
        local a = parse(reload.poll(pin .. "\n"))
        assert.equal(1, #swaps)
        assert.equal(1, #a.logs)
        assert.equal("warn", a.logs[1][1])
        assert.matches("strategy of Pinned: dry run", a.logs[1][2], 1, true)
        assert.equal(old, package.loaded.pin)
        swaps = {}
    end)

    it("swaps the strategy of the types using the changed module only",
       function()
        write(pin, pin_source("n2", "pin2"))
        local a = parse(reload.poll(pin .. "\n"))
        assert.same({ { name = "Pinned", id = "pin2", same = true } }, swaps)
        assert.same({ { "info", "reload: " .. pin
                        .. ": strategy of Pinned replaced (pin2)" } }, a.logs)
        assert.equal("n2", package.loaded.pin.new():allocate())
        assert.is_true(a.files[pin])
        swaps = {}
    end)

    it("reports a changed strategy module that no type uses", function()
        local rl = "lua/moonshard/strategy/rendezvous.lua"
        local a = parse(reload.poll(rl .. "\n"))
        assert.same({}, swaps)
        assert.equal(1, #a.logs)
        assert.matches("nothing replaced", a.logs[1][2], 1, true)
    end)

    it("loads a changed behavior protected and hands it to the host",
       function()
        write(beh, BEHAVIOR:gsub("function M.receive", "M.version = 2\n%0"))
        local a = parse(reload.poll(beh .. "\n"))
        assert.equal(1, #behavior_swaps)
        assert.equal("unitbeh", behavior_swaps[1].name)
        assert.equal(2, behavior_swaps[1].mod.version)
        assert.equal(behavior_swaps[1].mod, package.loaded.unitbeh)
        assert.same({ { "info", "reload: " .. beh .. ": behavior of Pinned, "
                        .. "Plain replaced (version 2)" } }, a.logs)
    end)

    it("keeps the old behavior on a syntax error, an error while loading "
       .. "or a bad shape, with one warn line each", function()
        local old = package.loaded.unitbeh
        for _, text in ipairs({ "local M = {", "error('boom')",
                                "return { init = 1 }" }) do
            write(beh, text)
            local a = parse(reload.poll(beh .. "\n"))
            assert.equal(1, #a.logs)
            assert.equal("warn", a.logs[1][1])
            assert.matches("^reload: ", a.logs[1][2])
            assert.matches("the old code stays$", a.logs[1][2])
        end
        assert.equal(1, #behavior_swaps)
        assert.equal(old, package.loaded.unitbeh)
    end)
end)

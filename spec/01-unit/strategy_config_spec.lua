local strategy = require "moonshard.strategy"
local config = require "moonshard.config"
local util = require "moonshard.strategy.util"

local LL = "least_loaded{absolute_limit=0,relative_limit=0.1}"

local created = {}

local function write_temp(src)
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(src)
    f:close()
    created[#created + 1] = path
    return path
end

-- A config with one entity type whose table ends with `extra`.
local function config_with(extra)
    return [[
local strategy = require "moonshard.strategy"
return {
    cluster = "c",
    nodes = { { name = "n1", listen = "127.0.0.1:7101",
                http = "127.0.0.1:7201" } },
    entities = {
        Order = {
            module = "order",
]] .. extra .. [[
        },
    },
}
]]
end

describe("moonshard.strategy", function()
    teardown(function()
        for _, p in ipairs(created) do
            os.remove(p)
        end
    end)

    it("exposes the constructor of every shipped module", function()
        for _, name in ipairs({ "least_loaded", "rendezvous",
                                "weighted_least_loaded", "role_aware",
                                "no_rebalance", "rate_limited" }) do
            assert.equal(require("moonshard.strategy." .. name).new,
                         strategy[name])
        end
    end)

    it("builds DESIGN's example", function()
        local alloc = strategy.role_aware(strategy.rendezvous(), { "backend" })
        local policy = strategy.rate_limited{ threshold = 1, max_concurrent = 4 }
        assert.is_true(strategy.is_strategy(alloc))
        assert.is_true(strategy.is_policy(policy))
        local bound = strategy.bind(alloc, policy)
        assert.equal("rate_limited{max_concurrent=4,threshold=1}"
                     .. "(role_aware{roles={\"backend\"}}(rendezvous))",
                     bound.id)
        assert.is_true(strategy.is_strategy(bound))
    end)

    describe("bind", function()
        it("uses the allocation strategy's rebalance when none is given",
           function()
            local alloc = strategy.least_loaded()
            assert.equal(alloc, strategy.bind(alloc, nil))
        end)

        it("wraps the allocation strategy in an unbound policy", function()
            local alloc = strategy.rendezvous()
            assert.equal("no_rebalance(rendezvous)",
                         strategy.bind(alloc, strategy.no_rebalance()).id)
        end)

        it("uses a full strategy as it is", function()
            local r = strategy.no_rebalance(strategy.least_loaded())
            assert.equal(r, strategy.bind(strategy.rendezvous(), r))
        end)

        it("rejects anything else", function()
            assert.has_error(function() strategy.bind({}, nil) end)
            assert.has_error(function()
                strategy.bind(strategy.rendezvous(), { id = "x" })
            end)
        end)
    end)

    it("loads in plain LuaJIT with only lua/ on package.path", function()
        local script = [[
            package.path = "lua/?.lua"
            package.cpath = ""
            local s = require "moonshard.strategy"
            local st = s.rate_limited(s.role_aware(s.weighted_least_loaded(),
                {"b"}), {threshold = 0})
            local v = { entity_type = "T", shard_count = 8, plan = {},
                in_progress = {}, members = {
                { name = "a", status = "up", roles = { b = true }, up_number = 1 },
                { name = "c", status = "up", roles = { b = true }, up_number = 2 } } }
            assert(st:allocate(0, v) == "a")
            assert(#st:rebalance(v) == 0)
            assert(s.rendezvous():allocate(3, v))
            io.write("ok")
        ]]
        local path = write_temp(script)
        local p = assert(io.popen("luajit " .. path .. " 2>&1"))
        local out = p:read("*a")
        p:close()
        assert.equal("ok", out)
    end)
end)

describe("config allocation and rebalance", function()
    it("default to least_loaded", function()
        local cfg = assert(config.load(write_temp(config_with(""))))
        local e = cfg.entities.Order
        assert.equal(LL, e.allocation_id)
        assert.equal(LL, e.rebalance_id)
        assert.is_true(util.is_strategy(e.allocation))
        assert.equal(e.allocation, e.rebalance)
    end)

    it("take DESIGN's example and report both ids", function()
        local cfg = assert(config.load(write_temp(config_with([[
            allocation = strategy.role_aware(strategy.rendezvous(), { "backend" }),
            rebalance = strategy.rate_limited{ threshold = 1, max_concurrent = 4 },
]]))))
        local e = cfg.entity_list[1]
        assert.equal("role_aware{roles={\"backend\"}}(rendezvous)",
                     e.allocation_id)
        assert.equal("rate_limited{max_concurrent=4,threshold=1}"
                     .. "(role_aware{roles={\"backend\"}}(rendezvous))",
                     e.rebalance_id)
        assert.equal(e.allocation_id, e.allocation.id)
        assert.equal(e.rebalance_id, e.rebalance.id)
    end)

    it("take a full strategy as rebalance", function()
        local cfg = assert(config.load(write_temp(config_with([[
            rebalance = strategy.no_rebalance(strategy.least_loaded()),
]]))))
        assert.equal("no_rebalance(" .. LL .. ")",
                     cfg.entities.Order.rebalance_id)
        assert.equal(LL, cfg.entities.Order.allocation_id)
    end)

    it("reject a policy without inner strategy as allocation", function()
        local path = write_temp(config_with([[
            allocation = strategy.no_rebalance(),
]]))
        local cfg, err = config.load(path)
        assert.is_nil(cfg)
        assert.matches(path:gsub("%p", "%%%0") .. ":9: "
                       .. "entities%.Order%.allocation: is a rebalance policy",
                       err)
    end)

    it("reject values that are not strategies, naming the field", function()
        for _, case in ipairs({
            { "allocation = \"least_loaded\",", "allocation: must be a strategy" },
            { "allocation = { id = \"x\" },", "allocation: must be a strategy" },
            { "rebalance = 3,", "rebalance: must be a rebalance policy" },
            { "rebalance = { id = \"x\" },", "rebalance: must be a rebalance" },
        }) do
            local cfg, err = config.load(write_temp(config_with(
                "            " .. case[1] .. "\n")))
            assert.is_nil(cfg)
            assert.matches(":9: entities.Order." .. case[2], err, 1, true)
        end
    end)

    it("report a bad strategy option at its line in the script", function()
        local path = write_temp(config_with([[
            allocation = strategy.least_loaded{ relative_limit = 7 },
]]))
        local cfg, err = config.load(path)
        assert.is_nil(cfg)
        assert.matches(":9: bad option 'relative_limit'", err, 1, true)
    end)

    it("load the custom strategy example", function()
        local cfg = assert(config.load("examples/custom_strategy/cluster.lua"))
        local e = cfg.entities.Counter
        assert.matches("^pinned{", e.allocation_id)
        assert.equal(e.allocation_id, e.rebalance.inner.id)
    end)
end)

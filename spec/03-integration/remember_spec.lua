-- Remember entities on one node (issue 12): what was running is started
-- again, without a message, when its shard starts here after a restart;
-- explicit stops forget it, failures and node stops do not; the memory
-- store keeps nothing across a restart.

local helpers = require "helpers.node"

local function lines(path)
    local t = {}
    for l in (helpers.read_file(path) or ""):gmatch("[^\n]+") do
        t[#t + 1] = l
    end
    return t
end

-- the ids started (init) per line "node type id"
local function started(path)
    local set = {}
    for _, l in ipairs(lines(path)) do
        local id = l:match("^%S+ %S+ (%S+)$")
        if id then set[id] = (set[id] or 0) + 1 end
    end
    return set
end

-- helpers.wait_until with the arguments in this file's order
local function wait_for(what, fn, timeout)
    return helpers.wait_until(fn, timeout or 10, what, 0.05)
end

local function opts(dir, out, store, extra)
    local remember = { store = store }
    if store == "file" then remember.dir = dir end
    for k, v in pairs(extra or {}) do remember[k] = v end
    return {
        entities = {
            Keeper = { module = "keeper", shard_count = 8,
                       remember = remember, on_error = "stop" },
        },
        files = { ["keeper_out.lua"] = string.format("return %q", out) },
    }
end

describe("remember-entities on one node", function()
    local dir, out
    before_each(function()
        dir = helpers.tmpdir()
        out = dir .. "/starts.log"
    end)
    after_each(function() helpers.stop_all_checked() end)

    it("starts again after a restart what ran; explicit stops forget",
       function()
        local o = opts(dir, out, "file")
        local n = helpers.start(o)
        for i = 1, 20 do
            n:tell("Keeper", "k" .. i, { type = "incr" })
        end
        -- k1 stops itself, k2 is stopped by k3's ref:stop(), k4 fails
        assert.same({ ok = true }, n:call("Keeper", "k1", { type = "stop" }))
        assert.same({ ok = true },
                    n:call("Keeper", "k3", { type = "stop_ref", id = "k2" }))
        n:tell("Keeper", "k4", { type = "fail" })
        wait_for("the stats", function()
            local s = n:stats()
            return s.remember.types.Keeper.remembered == 18
                and s.remember.queued == 0 and s.remember.inflight == 0
        end)
        n:stop()
        os.remove(out)
        local n2 = helpers.start(o)
        local set = wait_for("the eager starts", function()
            local s = started(out)
            local c = 0
            for _ in pairs(s) do c = c + 1 end
            return c >= 18 and s
        end)
        assert.is_nil(set.k1)
        assert.is_nil(set.k2)
        assert.equal(1, set.k4) -- a failure is not a passivation
        for i = 3, 20 do assert.equal(1, set["k" .. i], "k" .. i) end
        local s = n2:stats()
        assert.equal(18, s.remember.eager_starts)
        assert.equal(18, s.remember.types.Keeper.remembered)
        -- a message to a started one finds it active (born once)
        assert.equal(0, n2:call("Keeper", "k5", { type = "get" }).seen)
        helpers.sleep(0.3)
        assert.equal(1, started(out).k5)
    end)
end)

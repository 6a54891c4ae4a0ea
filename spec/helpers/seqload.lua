-- Load for the sequence-checking specs: loader processes
-- (spec/helpers/loader.lua) that send numbered tells to Seq entities
-- (spec/fixtures/seqcheck.lua) through a node's gateway.
--
--   local run = seqload.start(c, { { node, "a" }, ... }, ids)
--   local results = seqload.finish(run) -- { sender = result }

local ffi = require "ffi"
local helpers = require "helpers.node"

local format = string.format

pcall(ffi.cdef, "int setenv(const char *name, const char *value, int o);")

local M = {}

-- The Seq entities of nodes started from now on keep their state files in
-- cluster c's dir (SEQ_DIR), so it survives a move between nodes.
function M.use(c)
    ffi.C.setenv("SEQ_DIR", c.dir, 1)
    return c
end

-- Starts a loader per { node, sender } of cluster c, each sending to
-- every id of `ids`; returns a handle for finish().
function M.start(c, list, ids)
    local run = { procs = {}, outs = {}, stop = helpers.tmpdir() .. "/stop" }
    for i, spec in ipairs(list) do
        local out = c.dir .. format("/load-%s-%d.json", spec[2], i)
        os.remove(out)
        run.outs[i] = out
        run.procs[i] = helpers.spawn({
            "luajit", helpers.home .. "/spec/helpers/loader.lua",
            tostring(spec[1].port), spec[2], table.concat(ids, ","),
            run.stop, out,
        }, { stderr = c.dir .. "/loader-" .. spec[2] .. ".err" })
    end
    return run
end

-- Stops the loaders; returns their results, { sender = result }.
function M.finish(run)
    helpers.write_file(run.stop, "stop")
    local results = {}
    for i, p in ipairs(run.procs) do
        assert(p:wait(30), "a loader did not stop")
        local r = helpers.json.decode(helpers.read_file(run.outs[i]))
        results[r.sender] = r
    end
    return results
end

-- A cluster of `size` nodes running Seq (`shards` shards, idle_timeout
-- 600) with `settings`, whose Seq state lives in its dir (use), with n1
-- and n2 started and converged. Returns it.
function M.cluster(size, shards, settings)
    local c = helpers.cluster({
        size = size,
        entities = {
            Seq = { module = "seqcheck", shard_count = shards,
                    idle_timeout = 600 },
        },
        settings = settings,
    })
    M.use(c)
    c:start({ "n1", "n2" })
    c:wait_converged({ "n1", "n2" })
    return c
end

-- The number of Seq shards that node n's plan gives to member `name`, and
-- the plan.
function M.owned(n, name)
    local a = n:allocations("Seq")
    local k = 0
    for _, s in ipairs(a.shards) do
        if s.owner == name then k = k + 1 end
    end
    return k, a
end

-- Waits until Seq entity `id`, asked through node `via`, holds every
-- number each sender of `results` (from finish) had accepted for it;
-- returns its state (raises after `timeout` seconds, 15).
function M.arrived(results, via, id, timeout)
    return helpers.wait_until(function()
        local st, body = via:ask("Seq", id, { type = "get" }, 5)
        if st ~= 200 then
            return nil, id .. ": " .. tostring(st)
        end
        for sender, r in pairs(results) do
            local want = r.last[id] or 0
            local got = body.last[sender] or 0
            if got ~= want then
                return nil, format("%s has %s up to %d, the sender had %d "
                                   .. "accepted", id, sender, got, want)
            end
        end
        return body
    end, timeout or 15, "every accepted tell to arrive")
end

return M

-- spec/04-postgres/ui_lease_spec.lua: the status page's shard map of a
-- persistent type (leases in a throwaway PostgreSQL), in headless
-- chromium (spec/helpers/webdriver.lua): each node's page shows the
-- epoch of every lease it holds, equal to the lease row's, and names the
-- owner as the holder of the others. n1's page is saved as
-- build/ui-lease-screenshot.png (the folder of MOONSHARD_BIN).

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local webdriver = require "helpers.webdriver"

local cjson = helpers.json
local format = string.format

local SHARDS = 6

describe("the status page of a persistent type", function()
    local srv, c, browser

    setup(function() srv = pg.start() end)

    teardown(function()
        local left = browser and browser:close() or {}
        helpers.stop_all_checked()
        pg.stop_all()
        assert.same({}, helpers.leaks())
        assert.same({}, left)
    end)

    it("shows each node's lease epochs on its page, as in the database",
       function()
        local db = "ui_lease"
        c = helpers.cluster({
            size = 2,
            entities = { Seq = { module = "seq", shard_count = SHARDS,
                                 persistence = "state", lease_duration = 5,
                                 lease_renew_interval = 1 } },
            settings = { database = pg.database(srv, db),
                         rebalance_interval = 600 },
        })
        c:start()
        c:wait_converged()
        local n1 = c:node("n1")
        pg.wait_migrated(n1, 30)
        pg.wait_migrated(c:node("n2"), 30)
        -- one ask per shard: each gets an owner, and its owner a lease
        local touched, i = {}, 0
        while #touched < SHARDS and i < 1000 do
            local id = "e" .. i
            local shard = n1:owner("Seq", id).shard
            if not touched[shard + 1] then
                local st, _, raw = n1:ask("Seq", id, { type = "report" }, 20)
                assert.are.equal(200, st, raw)
                touched[shard + 1] = id
            end
            i = i + 1
        end
        -- the lease rows: shard -> owner, epoch
        local rows = helpers.wait_until(function()
            local out, n = {}, 0
            for _, line in ipairs(pg.query(srv, db,
                    "SELECT shard || ' ' || owner || ' ' || epoch FROM "
                    .. "moonshard_leases WHERE type = 'Seq'")) do
                local shard, owner, epoch = line:match("^(%d+) (%S+) (%d+)$")
                out[tonumber(shard)] = { owner = owner, epoch = epoch }
                n = n + 1
            end
            return n == SHARDS and out or nil, n
        end, 20, "a lease row for every shard")
        local holders = {}
        for _, r in pairs(rows) do holders[r.owner] = true end
        assert.is_true(holders.n1 and holders.n2 or false,
                       "both nodes hold leases: " .. cjson.encode(rows))

        browser = webdriver.start()
        for _, name in ipairs({ "n1", "n2" }) do
            local n = c:node(name)
            browser:open("http://" .. n.address .. "/ui")
            local cells = helpers.wait_until(function()
                local got = browser:js([[
                    const out = [];
                    for (const c of document.querySelectorAll(
                            '.map[data-type="Seq"] .cell'))
                        out.push({ shard: +c.dataset.shard,
                                   owner: c.dataset.owner,
                                   epoch: c.dataset.epoch || null,
                                   title: c.title });
                    return out;
                ]])
                if #got ~= SHARDS then return nil, #got end
                for _, cell in ipairs(got) do
                    local r = rows[cell.shard]
                    if r.owner == name and cell.epoch == cjson.null then
                        return nil, "no epoch yet on shard " .. cell.shard
                    end
                end
                return got
            end, 15, name .. "'s page to show its leases", 0.2)
            for _, cell in ipairs(cells) do
                local r = rows[cell.shard]
                assert.are.equal(r.owner, cell.owner)
                if r.owner == name then
                    assert.are.equal(r.epoch, cell.epoch)
                    assert.is_truthy(cell.title:find(format(
                        "lease held by %s, epoch %s", name, r.epoch), 1,
                        true), cell.title)
                else
                    assert.are.equal(cjson.null, cell.epoch)
                    assert.is_truthy(cell.title:find("lease held by its "
                        .. "owner " .. r.owner, 1, true), cell.title)
                end
            end
            assert.same({}, browser:severe())
            if name == "n1" then -- a CI artifact beside build/ui-screenshot.png
                browser:screenshot(helpers.bin:match("^(.*)/[^/]+$")
                                   .. "/ui-lease-screenshot.png")
            end
        end
    end)
end)

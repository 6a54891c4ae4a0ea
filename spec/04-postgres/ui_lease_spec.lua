-- spec/04-postgres/ui_lease_spec.lua: the status page's shard map of a
-- persistent type (leases in a throwaway PostgreSQL), in headless
-- chromium (spec/helpers/webdriver.lua): ONE node's page shows the holder
-- and epoch of EVERY shard's lease, equal to the lease rows (read by the
-- page from GET /v1/leases/{type}, which answers the rows `moonshard db
-- leases` prints). n1's page is saved as build/ui-lease-screenshot.png
-- (the folder of MOONSHARD_BIN).

local helpers = require "helpers.node"
local pg = require "helpers.pg"
local webdriver = require "helpers.webdriver"

local cjson = helpers.json
local format = string.format

local SHARDS = 6

describe("the status page of a persistent type", function()
    local srv, c, browser, rows
    local db = "ui_lease"

    setup(function() srv = pg.start() end)

    teardown(function()
        webdriver.teardown(browser, pg.stop_all)
    end)

    it("answers GET /v1/leases/{type} with the database's lease rows",
       function()
        c = helpers.cluster({
            size = 2,
            entities = { Seq = { module = "seq", shard_count = SHARDS,
                                 persistence = "state", lease_duration = 5,
                                 lease_renew_interval = 1 },
                         Plain = { module = "counter", shard_count = 2 },
                         -- only to learn that n2 registered (below)
                         Witness = { module = "counter",
                                     shard_count = 64 } },
            settings = { database = pg.database(srv, db),
                         rebalance_interval = 600 },
        })
        c:start()
        c:wait_converged()
        local n1 = c:node("n1")
        pg.wait_migrated(n1, 30)
        pg.wait_migrated(c:node("n2"), 30)
        -- Shards go to n2 only once the coordinator has its registration,
        -- which may come after the converged view: until then every Seq
        -- shard goes to n1, and the move below puts shard 0 back on n1
        -- (no other member can host it; no rebalance here). A node
        -- registers its types in name order in one answer, so a Witness
        -- shard on n2 says its Seq registration arrived.
        n1:wait_placed_on("Witness", "n2")
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
        -- one shard moved by hand: its new owner takes the lease at a
        -- higher epoch, so the epochs differ between shards
        local before = n1:allocations("Seq").shards[1].owner
        local st, _, raw = n1:http("POST", "/v1/move/Seq/0", nil,
            { headers = { ["X-Moonshard-Token"] = c.admin_token } })
        assert.are.equal(202, st, raw)
        helpers.wait_until(function()
            local now = n1:allocations("Seq").shards[1].owner
            return now ~= before and now or nil
        end, 20, "shard 0 to move away from " .. before)
        -- the lease rows: shard -> owner, epoch
        rows = helpers.wait_until(function()
            local out, n = {}, 0
            for _, line in ipairs(pg.query(srv, db,
                    "SELECT shard || ' ' || owner || ' ' || epoch FROM "
                    .. "moonshard_leases WHERE type = 'Seq'")) do
                local shard, owner, epoch = line:match("^(%d+) (%S+) (%d+)$")
                out[tonumber(shard)] = { owner = owner, epoch = epoch }
                n = n + 1
            end
            return n == SHARDS and out[0].epoch == "2" and out or nil, n
        end, 20, "a lease row for every shard, shard 0's at epoch 2")
        local holders = {}
        for _, r in pairs(rows) do holders[r.owner] = true end
        assert.is_true(holders.n1 and holders.n2 or false,
                       "both nodes hold leases: " .. cjson.encode(rows))

        -- `moonshard db leases CONFIG Seq`: type shard owner epoch ...
        local code, out, err = helpers.run({ helpers.bin, "db", "leases",
                                             c.config, "Seq" }, 30)
        assert.are.equal(0, code, out .. err)
        local cli = {}
        for shard, owner, epoch in out:gmatch("\nSeq +(%d+) +(%S+) +(%d+) ")
        do
            cli[#cli + 1] = { shard = tonumber(shard), holder = owner,
                              epoch = tonumber(epoch) }
        end
        assert.are.equal(SHARDS, #cli, out)
        -- every node answers the same rows, ordered by shard
        for _, name in ipairs({ "n1", "n2" }) do
            local ans = c:node(name):get_json("/v1/leases/Seq")
            assert.are.equal("Seq", ans.type)
            local got = {}
            for k, r in ipairs(ans.leases) do
                got[k] = { shard = r.shard, holder = r.holder,
                           epoch = r.epoch }
                assert.is_true(r.held, cjson.encode(r))
                assert.is_true(r.expires_in_ms > 0 and
                               r.expires_in_ms <= 5000, cjson.encode(r))
                assert.are.equal(rows[r.shard].owner, r.holder)
                assert.are.equal(tonumber(rows[r.shard].epoch), r.epoch)
            end
            assert.same(cli, got)
        end
        -- an unknown type, a type without leases: 404
        local body
        st, body, raw = n1:http("GET", "/v1/leases/Nope")
        assert.are.equal(404, st, raw)
        assert.are.equal("unknown_type", body.error.code)
        st, body, raw = n1:http("GET", "/v1/leases/Plain")
        assert.are.equal(404, st, raw)
        assert.are.equal("not_leased", body.error.code)
        st = n1:http("POST", "/v1/leases/Seq", "")
        assert.are.equal(405, st)
    end)

    it("shows the holder and epoch of every shard on one node's page, as "
       .. "in the database", function()
        assert.is_truthy(rows, "the cluster of the test before")
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
                                   holder: c.dataset.holder || null,
                                   label: (c.querySelector('.epoch') ||
                                           {}).textContent || null,
                                   title: c.title });
                    return out;
                ]])
                if #got ~= SHARDS then return nil, #got end
                for _, cell in ipairs(got) do
                    if cell.holder == cjson.null then
                        return nil, "no holder yet on shard " .. cell.shard
                    end
                end
                return got
            end, 15, name .. "'s page to show its leases", 0.2)
            -- every cell, this node's leases and the other's alike
            local others = 0
            for _, cell in ipairs(cells) do
                local r = rows[cell.shard]
                assert.are.equal(r.owner, cell.owner)
                assert.are.equal(r.owner, cell.holder)
                assert.are.equal(r.epoch, cell.epoch)
                assert.are.equal("e" .. r.epoch, cell.label)
                assert.is_truthy(cell.title:find(format(
                    "lease held by %s, epoch %s", r.owner, r.epoch), 1,
                    true), cell.title)
                if r.owner ~= name then others = others + 1 end
            end
            assert.is_true(others > 0, "some shard is the other node's")
            assert.same({}, browser:severe())
            if name == "n1" then -- a CI artifact beside build/ui-screenshot.png
                browser:screenshot(helpers.bin:match("^(.*)/[^/]+$")
                                   .. "/ui-lease-screenshot.png")
            end
        end
    end)

    it("answers 503 while the database is down, and the page falls back "
       .. "without console errors", function()
        assert.is_truthy(browser, "the page of the test before")
        local n1 = c:node("n1")
        local holders = [[
            const out = [];
            for (const c of document.querySelectorAll(
                    '.map[data-type="Seq"] .cell'))
                if (c.dataset.holder) out.push(c.dataset.holder);
            return out.length;
        ]]
        browser:open("http://" .. n1.address .. "/ui")
        helpers.wait_until(function()
            return browser:js(holders) == SHARDS or nil
        end, 15, "n1's page to show every holder", 0.2)
        srv:pause()
        local ok, err = pcall(function()
            local st, body, raw = n1:http("GET", "/v1/leases/Seq", nil,
                                          { max_time = 20 })
            assert.are.equal(503, st, raw)
            assert.is_truthy(body and body.error and body.error.id, raw)
            assert.is_truthy(body.error.code == "db_connection" or
                             body.error.code == "timeout", raw)
            -- the page stops reading them and shows what n1 knows itself
            helpers.wait_until(function()
                return browser:js(holders) == 0 or nil
            end, 20, "n1's page to fall back", 0.2)
            assert.are.equal(SHARDS, #browser:js([[
                return Array.from(document.querySelectorAll(
                    '.map[data-type="Seq"] .cell'), c => c.dataset.shard);
            ]]))
            assert.is_false(browser:js(
                "return !document.querySelector('#banner').hidden;"))
            assert.same({}, browser:severe())
        end)
        srv:resume()
        assert(ok, err)
        -- and reads them again once the database is back
        helpers.wait_until(function()
            return browser:js(holders) == SHARDS or nil
        end, 30, "n1's page to show every holder again", 0.2)
        assert.same({}, browser:severe())
    end)
end)

-- The status page (GET /ui, ui/ and runtime/io/http_ui.c) in a real
-- headless browser, against a running 3-node cluster: Debian's chromium
-- driven through chromedriver's WebDriver HTTP API on 127.0.0.1 (both
-- installed by .ci/deps; a missing one fails the spec, it never skips).
--
-- chromedriver is started by PID on a free port; the session runs
-- chromium headless (--no-sandbox: the specs run as root) with its own
-- profile folder and the browser's console log on. Teardown deletes the
-- session (chromedriver then ends its chromium), stops chromedriver by
-- PID, checks that no process of that profile is left, and stops the
-- nodes. The screenshot goes to the build folder (the folder of
-- MOONSHARD_BIN: build/ui-screenshot.png), a CI artifact.

local helpers = require "helpers.node"
local webdriver = require "helpers.webdriver"

local cjson = helpers.json
local format = string.format

local TOKEN_HEADER = "X-Moonshard-Token"

describe("the status page in headless chromium", function()
    local c, n1, browser

    local function js(script) return browser:js(script) end
    local function severe() return browser:severe() end

    -- The page's view of a type's shard map: { count, cells = { [shard] =
    -- { owner, moving } } }.
    local function page_map(t)
        return js(format([[
            const map = document.querySelector('.map[data-type="%s"]');
            if (!map) return null;
            const cells = {};
            for (const c of map.querySelectorAll('.cell'))
                cells[c.dataset.shard] = { owner: c.dataset.owner,
                    moving: c.classList.contains('moving') };
            return { count: map.querySelectorAll('.cell').length, cells };
        ]], t))
    end

    local function page_moves()
        return js([[
            return Array.from(document.querySelectorAll('#moves tbody tr'))
                .map(r => r.dataset.type + '/' + r.dataset.shard);
        ]])
    end

    setup(function()
        c = helpers.cluster_up({
            size = 3,
            entities = {
                Counter = { module = "counter", shard_count = 24 },
                Tally = { module = "counter", shard_count = 7 },
            },
            -- no voluntary moves: only the spec's move changes owners
            settings = { rebalance_interval = 600, handoff_timeout = 30 },
        })
        n1 = c:node("n1")
        -- the move test needs a Counter shard on n3: shards go to n3
        -- only once the coordinator has its registration, which may
        -- come after the converged view (and no rebalance fixes it here)
        n1:wait_placed_on("Counter", "n3")
        -- every shard of Counter and Tally gets an owner
        for i = 1, 120 do
            assert.are.equal(202, n1:tell("Counter", "c" .. i,
                                          { type = "incr" }))
            assert.are.equal(202, n1:tell("Tally", "t" .. i,
                                          { type = "incr" }))
        end
        helpers.wait_until(function()
            for _, t in ipairs({ "Counter", "Tally" }) do
                for _, s in ipairs(n1:allocations(t).shards) do
                    if s.owner == cjson.null then return nil end
                end
            end
            return true
        end, 15, "every shard to have an owner")

        browser = webdriver.start()
        browser:open("http://" .. n1.address .. "/ui")
    end)

    teardown(function()
        webdriver.teardown(browser)
    end)

    it("serves its files with their types and refuses other paths",
       function()
        local want = {
            ["/ui"] = "text/html; charset=utf-8",
            ["/ui/"] = "text/html; charset=utf-8",
            ["/ui/index.html"] = "text/html; charset=utf-8",
            ["/ui/style.css"] = "text/css; charset=utf-8",
            ["/ui/app.js"] = "text/javascript; charset=utf-8",
            ["/ui/favicon.svg"] = "image/svg+xml",
        }
        for path, ctype in pairs(want) do
            local conn = assert(helpers.tcp_open(n1.port))
            assert(conn:send(helpers.format_request(n1.port, "GET", path,
                                                    nil, true)))
            local got = conn:read(5)
            conn:close()
            assert.is_truthy(got:find("^HTTP/1.1 200 "), path .. ": " .. got)
            assert.is_truthy(got:find("\r\nContent%-Type: "
                .. ctype:gsub("%p", "%%%0") .. "\r\n"), path)
            assert.is_truthy(got:find("\r\nX%-Content%-Type%-Options: "
                                      .. "nosniff\r\n"), path)
        end
        local refused = {
            ["/ui/../README.md"] = 400, ["/ui/..%2fREADME.md"] = 400,
            ["/ui/%2e%2e/README.md"] = 400, ["/ui/%2e%2e%2fREADME.md"] = 400,
            ["/ui/..\\README.md"] = 400, ["/ui/a/b.js"] = 400,
            ["/ui/..."] = 400, ["/ui/nope.js"] = 404,
            ["/ui/.hidden.js"] = 404, ["/ui/app.js.map"] = 404,
            ["/ui/README"] = 404, ["/ui/" .. ("a"):rep(70) .. ".js"] = 404,
            ["/uix"] = 404,
        }
        for path, status in pairs(refused) do
            local st, body = n1:http("GET", path)
            assert.are.equal(status, st, path)
            assert.is_table(body.error, path)
        end
        assert.are.equal(405, (n1:http("POST", "/ui", "{}")))
        local _, _, raw = n1:http("GET", "/")
        assert.is_truthy(raw:find("http://" .. n1.address .. "/ui", 1,
                                  true), raw)
    end)

    it("loads without console errors and shows the three members",
       function()
        local rows = helpers.wait_until(function()
            local r = js([[
                return Array.from(document.querySelectorAll(
                    '#members tbody tr')).map(r => r.dataset.name + ' '
                    + r.dataset.status);
            ]])
            return #r == 3 and r or nil, #r
        end, 15, "the page to list the members", 0.2)
        table.sort(rows)
        assert.same({ "n1 up", "n2 up", "n3 up" }, rows)
        local text = js("return document.querySelector('#members')"
                        .. ".innerText;")
        assert.is_truthy(text:find("coordinator", 1, true), text)
        assert.is_true(js("return document.querySelector('#banner')"
                          .. ".hidden;"))
        -- a few refreshes later, with some traffic for the counters,
        -- still no error in the console
        local stop_at, k = helpers.now() + 3, 0
        while helpers.now() < stop_at do
            k = k + 1
            n1:tell("Counter", "load" .. k % 50, { type = "incr" })
            helpers.sleep(0.01)
        end
        assert.same({}, severe())
        -- the counters' sparklines: the load is in the throughput's
        -- history (its peak over the last minute)
        assert.are.equal(6, js("return document.querySelectorAll("
                               .. "'.card canvas').length;"))
        helpers.wait_until(function()
            return tonumber(js("return document.querySelector("
                .. "'.card[data-counter=\"throughput\"]').dataset.peak;"))
                > 0
        end, 5, "the throughput's history to show the load", 0.2)
    end)

    it("draws one cell per shard, coloured by the plan's owner", function()
        for _, t in ipairs({ "Counter", "Tally" }) do
            local a = n1:allocations(t)
            local m = helpers.wait_until(function()
                local m = page_map(t)
                return m and m.count == a.shard_count and m or nil
            end, 10, t .. "'s shard map", 0.2)
            assert.are.equal(a.shard_count, m.count)
            for _, s in ipairs(a.shards) do
                assert.are.equal(s.owner, m.cells[tostring(s.shard)].owner)
            end
        end
        assert.same({}, severe())
    end)

    it("shows a move started by hand while it lasts, then the new owner",
       function()
        local n3 = c:node("n3")
        local shard
        for _, s in ipairs(n1:allocations("Counter").shards) do
            if s.owner == "n3" then shard = s.shard break end
        end
        assert.is_number(shard)
        -- n3 paused: the move waits for it, visibly
        n3:signal(helpers.SIGSTOP)
        local ok, err = pcall(function()
            local st, _, raw = n1:http("POST", format("/v1/move/Counter/%d",
                shard), nil, { headers = { [TOKEN_HEADER] = c.admin_token } })
            assert.are.equal(202, st, raw)
            helpers.wait_until(function()
                local m = page_map("Counter")
                return m and m.cells[tostring(shard)].moving
            end, 10, "the page to mark the shard moving", 0.2)
            local moves = page_moves()
            assert.same({ "Counter/" .. shard }, moves)
            browser:screenshot(helpers.bin:match("^(.*)/[^/]+$")
                               .. "/ui-screenshot.png")
        end)
        n3:signal(helpers.SIGCONT)
        assert(ok, err)
        local m = helpers.wait_until(function()
            local m = page_map("Counter")
            local cell = m and m.cells[tostring(shard)]
            return cell and not cell.moving and cell.owner ~= "n3"
                and #page_moves() == 0 and m or nil
        end, 20, "the move to end on the page", 0.2)
        local now = n1:allocations("Counter").shards[shard + 1]
        assert.are.equal(shard, now.shard)
        assert.are_not.equal("n3", now.owner)
        assert.are.equal(now.owner, m.cells[tostring(shard)].owner)
        assert.same({}, severe())
    end)

    it("says so when its node stops answering, and recovers", function()
        n1:signal(helpers.SIGSTOP)
        local ok, text = pcall(helpers.wait_until, function()
            return js("const b = document.querySelector('#banner');"
                      .. "return !b.hidden && b.textContent;")
        end, 10, "the error banner", 0.2)
        n1:signal(helpers.SIGCONT)
        assert(ok, text)
        assert.is_truthy(text:find("Cannot reach", 1, true), text)
        helpers.wait_until(function()
            return js("return document.querySelector('#banner').hidden;")
        end, 10, "the banner to go once the node answers", 0.2)
        -- still three members, refreshed
        assert.are.equal(3, js("return document.querySelectorAll("
                               .. "'#members tbody tr').length;"))
    end)
end)

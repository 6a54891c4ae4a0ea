-- The status page's owner colours are the same on every node's page, as
-- the README says, whenever each page was opened: here the page of n1 is
-- open while n2 joins, and a page of n2 opened afterwards must colour
-- each member as n1's does. (Colours went by the order a page first saw
-- the names: n1's page gave n2 the third colour, n2's page the second.)
-- Headless chromium by PID (spec/helpers/webdriver.lua).

local helpers = require "helpers.node"
local webdriver = require "helpers.webdriver"

describe("the status page's owner colours", function()
    local c, browser

    -- name -> swatch colour of the members table of the open page, once
    -- it lists `want` members
    local function colours(want)
        return helpers.wait_until(function()
            local got = browser:js([[
                const out = {};
                let n = 0;
                for (const r of document.querySelectorAll('#members tbody tr')) {
                    out[r.dataset.name] = r.querySelector('.swatch')
                        .style.background;
                    n++;
                }
                return { n, out };
            ]])
            return got.n == want and got.out or nil, got.n
        end, 20, want .. " members on the page", 0.2)
    end

    setup(function()
        c = helpers.cluster({
            size = 3,
            entities = { Counter = { module = "counter", shard_count = 4 } },
        })
        c:start({ "n1", "n3" })
        c:wait_converged({ "n1", "n3" }, 20)
        browser = webdriver.start()
    end)

    teardown(function()
        webdriver.teardown(browser)
    end)

    it("are the same on a page opened before a join and one after",
       function()
        browser:open("http://" .. c:node("n1").address .. "/ui")
        colours(2)
        c:start({ "n2" })
        c:wait_converged(nil, 20)
        local before = colours(3)
        browser:open("http://" .. c:node("n2").address .. "/ui")
        local after = colours(3)
        assert.same(after, before)
        assert.are_not.equal(before.n1, before.n2)
        assert.are_not.equal(before.n2, before.n3)
        assert.same({}, browser:severe())
    end)
end)

local util = require "moonshard.strategy.util"
local views = require "helpers.views"

describe("moonshard.strategy.util", function()
    describe("format_number", function()
        it("writes integers in decimal and others in their shortest form",
           function()
            assert.equal("0", util.format_number(0))
            assert.equal("0", util.format_number(-0.0))
            assert.equal("20", util.format_number(20.0))
            assert.equal("-3", util.format_number(-3))
            assert.equal("0.1", util.format_number(0.1))
            assert.equal("0.30000000000000004", util.format_number(0.1 + 0.2))
            assert.equal("1e+300", util.format_number(1e300))
            assert.has_error(function() util.format_number(0 / 0) end)
            assert.has_error(function() util.format_number(math.huge) end)
        end)
    end)

    describe("canon", function()
        it("writes equal tables the same whatever their insertion order",
           function()
            local a = { b = 2, a = { 3, 1 }, ["x-y"] = "q\"", [1.5] = true }
            local b = {}
            b[1.5] = true
            b["x-y"] = "q\""
            b.a = { 3, 1 }
            b.b = 2
            assert.equal(util.canon(a), util.canon(b))
            assert.equal("{[1.5]=true,a={3,1},b=2,[\"x-y\"]=\"q\\\"\"}",
                         util.canon(a))
        end)

        it("refuses functions", function()
            assert.has_error(function() util.canon({ f = print }) end)
        end)
    end)

    describe("id", function()
        it("is the name, then options if any, then the inner id", function()
            assert.equal("x", util.id("x"))
            assert.equal("x", util.id("x", {}))
            assert.equal("x{a=1}", util.id("x", { a = 1 }))
            assert.equal("x{a=1}(y)", util.id("x", { a = 1 }, { id = "y" }))
        end)
    end)

    describe("compare_versions", function()
        it("compares dotted components as numbers", function()
            assert.equal(1, util.compare_versions("1.10.0", "1.9.9"))
            assert.equal(-1, util.compare_versions("1.2", "1.10"))
            assert.equal(0, util.compare_versions("1.0", "1.0.0"))
            assert.equal(0, util.compare_versions("2", "2.0"))
            assert.equal(1, util.compare_versions("2.0.1", "2"))
            assert.equal(0, util.compare_versions(nil, "0.0"))
        end)

        it("orders a qualified version before the plain one", function()
            assert.equal(-1, util.compare_versions("1.0.0-rc1", "1.0.0"))
            assert.equal(-1, util.compare_versions("1.0.0-rc1", "1.0.0-rc2"))
            assert.equal(1, util.compare_versions("1.0.1-rc1", "1.0.0"))
        end)

        it("compares text components as text", function()
            assert.equal(-1, util.compare_versions("1.a", "1.b"))
        end)

        it("puts numbers before text, so the order is transitive", function()
            -- 1.2 < 1.10 < 1.1x, and never a cycle back to 1.2
            assert.equal(-1, util.compare_versions("1.2", "1.10"))
            assert.equal(-1, util.compare_versions("1.10", "1.1x"))
            assert.equal(-1, util.compare_versions("1.2", "1.1x"))
            assert.equal(1, util.compare_versions("1.1x", "1.2"))
            local list = { "1.1x", "1.10", "2", "1.2", "1.a", "1.9" }
            table.sort(list, function(a, b)
                return util.compare_versions(a, b) < 0
            end)
            assert.same({ "1.2", "1.9", "1.10", "1.1x", "1.a", "2" }, list)
        end)
    end)

    describe("address_less", function()
        it("compares hosts as text and ports as numbers", function()
            assert.is_true(util.address_less("h:9000", "h:10000"))
            assert.is_false(util.address_less("h:10000", "h:9000"))
            assert.is_true(util.address_less("a:9", "b:1"))
            assert.is_true(util.address_less("[::1]:7101", "[::1]:7102"))
        end)
    end)

    describe("limit", function()
        it("is max(1, min(floor(relative * shards), absolute))", function()
            assert.equal(10, util.limit(100, 0.1, 0))
            assert.equal(10, util.limit(100, 0.1, nil))
            assert.equal(3, util.limit(100, 0.1, 3))
            assert.equal(1, util.limit(5, 0.1, 0))
            assert.equal(1, util.limit(100, 0.5, 1))
        end)
    end)

    describe("view", function()
        it("sorts members oldest first, then by address, then by name",
           function()
            local members = views.members(4, {
                { up_number = 3 }, { up_number = 1, address = "h:20" },
                { up_number = 1, address = "h:3" }, { up_number = 2 },
            })
            local v = util.view(views.view{ members = members })
            local names = {}
            for i, m in ipairs(v.members) do
                names[i] = m.name
            end
            assert.same({ "n3", "n2", "n4", "n1" }, names)
            assert.equal(members[2], v.by_name.n2)
        end)

        it("drops down and removed members and rejects unknown statuses",
           function()
            local members = views.members(3, { nil, { status = "down" },
                                               { status = "removed" } })
            assert.equal(1, #util.view(views.view{ members = members }).members)
            members[2].status = "sleeping"
            assert.has_error(function()
                util.view(views.view{ members = members })
            end, "bad view: member n2 has status sleeping")
        end)
    end)

    describe("stable", function()
        it("is false while a member is joining, unreachable or on another"
           .. " version", function()
            assert.is_true(util.stable(util.view(views.view{
                members = views.members(3) })))
            for _, o in ipairs({ { status = "joining" }, { reachable = false },
                                 { version = "1.0.1" } }) do
                local ok, why = util.stable(util.view(views.view{
                    members = views.members(3, { nil, o }) }))
                assert.is_false(ok)
                assert.is_string(why)
            end
        end)
    end)

    describe("check_proposals", function()
        it("sorts and deduplicates a good answer", function()
            local v = util.view(views.view{ shard_count = 8 })
            assert.same({ 1, 3, 7 }, util.check_proposals({ 7, 1, 3, 1 }, v,
                                                           "x"))
        end)
    end)
end)

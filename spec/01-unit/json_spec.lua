-- moonshard.json outside a node: the array marker that the node's encoder
-- honors (runtime/lua/json_encode.c; its own test is spec/c/
-- test_json_encode.c), usable by behaviors under busted.

local json = require "moonshard.json"
local cjson = require "cjson"

describe("moonshard.json", function()
    it("marks a table as an array with __jsontype = \"array\"", function()
        local t = {}
        assert.equal(t, json.array(t))
        assert.equal("array", getmetatable(t).__jsontype)
        assert.equal("array", json.array_mt.__jsontype)
    end)

    it("keeps the elements of a table it marks", function()
        local t = json.array({ 1, 2, 3 })
        assert.same({ 1, 2, 3 }, { t[1], t[2], t[3] })
        t[4] = 4
        assert.equal(4, #t)
    end)

    it("has a shared empty array that cannot be filled", function()
        assert.equal(0, #json.empty_array)
        assert.has_error(function() json.empty_array[1] = "x" end,
            "moonshard.json.empty_array is shared and read-only: use "
            .. "json.array({}) for an array to fill")
        assert.is_nil(rawget(json.empty_array, 1))
        assert.has_error(function() setmetatable(json.empty_array, nil) end)
    end)

    it("gives lua-cjson's null", function()
        assert.equal(cjson.null, json.null)
    end)

    it("raises on a non-table", function()
        assert.has_error(function() json.array("x") end,
                         "bad 't' argument: a table is required")
    end)

    it("has no encoder outside a node", function()
        assert.is_nil(json.encode)
    end)
end)

local errors = require "moonshard.error"

describe("moonshard.error", function()
    it("builds a plain table with code, message and fields", function()
        local e = errors.new("overflow", "shard 3 is full", { shard = 3 })
        assert.same({ code = "overflow", message = "shard 3 is full", shard = 3 },
                    setmetatable(e, nil))
    end)

    it("prints as 'code: message'", function()
        assert.equal("timeout: no reply in 2 s",
                     tostring(errors.new("timeout", "no reply in 2 s")))
    end)

    it("uses the code as message when none is given", function()
        assert.equal("cancelled", errors.new("cancelled").message)
    end)

    it("does not let fields override code or message", function()
        local e = errors.new("timeout", "late", { code = "x", message = "y" })
        assert.equal("timeout", e.code)
        assert.equal("late", e.message)
    end)

    it("tells error tables and codes apart", function()
        local e = errors.new("no_reply", "handler did not reply")
        assert.is_true(errors.is(e))
        assert.is_true(errors.is(e, "no_reply"))
        assert.is_false(errors.is(e, "timeout"))
        assert.is_false(errors.is("no_reply", "no_reply"))
        assert.is_false(errors.is({ message = "no code" }))
    end)

    it("restores the metatable on a table decoded from the wire", function()
        local decoded = { code = "no_owner", message = "no owner", shard = 1 }
        local e = errors.from(decoded)
        assert.equal(decoded, e)
        assert.equal("no_owner: no owner", tostring(e))
        assert.is_nil(errors.from({ message = "no code" }))
    end)

    it("rejects a missing or non-string code", function()
        assert.has_error(function() errors.new(nil, "x") end)
        assert.has_error(function() errors.new("", "x") end)
        assert.has_error(function() errors.new(42) end)
    end)

    -- The C table (runtime/core/errors.h) and M.codes must name the same
    -- codes: a code the host sends that Lua does not know, or one Lua
    -- documents that the host never makes, is drift.
    describe("against the C table", function()
        local home = os.getenv("MOONSHARD_HOME") or "."
        local rows, by_name = {}, {}
        local f = assert(io.open(home .. "/runtime/core/errors.h", "rb"))
        local text = f:read("*a")
        f:close()
        -- between fields: blanks, and the backslashes that continue a line
        local sep = "[%s\\]*,[%s\\]*"
        local row = "X%((MS_[%w_]+)" .. sep .. "(%-?%d+)" .. sep
                    .. '"([^"]*)"'
        for const, value, name in text:gmatch(row) do
            rows[#rows + 1] = { const = const, value = tonumber(value),
                                name = name }
        end
        local _, opened = text:gsub("X%(MS_", "")

        it("is read from the header, every row", function()
            -- a parser that finds nothing, or skips a row it cannot read,
            -- would pass the checks below
            assert.is_true(#rows >= 18)
            assert.equal(opened, #rows)
        end)

        it("has unique constants, values and names", function()
            local consts, values = {}, {}
            for _, r in ipairs(rows) do
                assert.is_nil(consts[r.const], r.const)
                assert.is_nil(values[r.value], r.const)
                assert.is_nil(by_name[r.name], r.name)
                assert.is_true(r.value < 0, r.const)
                assert.is_truthy(r.name:match("^[a-z][a-z_]*$"), r.name)
                consts[r.const], values[r.value] = true, true
                by_name[r.name] = r
            end
        end)

        it("has every C code in Lua", function()
            for _, r in ipairs(rows) do
                assert.equal(r.name, errors.codes[r.name],
                             r.const .. " is missing from M.codes")
            end
        end)

        it("has every Lua code in C", function()
            for name, value in pairs(errors.codes) do
                assert.equal(name, value)
                assert.is_table(by_name[name],
                                name .. " is not in runtime/core/errors.h")
            end
        end)

        it("gives a failed module and an unreachable owner two codes",
           function()
            assert.equal("MS_EUNAVAIL", by_name.unavailable.const)
            assert.equal("MS_ENOOWNER", by_name.no_owner.const)
        end)
    end)
end)

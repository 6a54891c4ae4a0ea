local partition = require "moonshard.partition"

local bit = require "bit"

-- An independent FNV-1a 64 over two 32-bit halves with plain doubles, to
-- check the FFI version on inputs the published vectors do not cover.
local function reference_hex(s)
    local hi, lo = 0xcbf29ce4, 0x84222325
    for i = 1, #s do
        lo = bit.bxor(lo, s:byte(i)) % 2 ^ 32
        -- (hi:lo) * (2^40 + 0x1b3), kept modulo 2^64.
        local lo_prod = lo * 0x1b3
        local new_lo = lo_prod % 2 ^ 32
        local carry = (lo_prod - new_lo) / 2 ^ 32
        hi = (hi * 0x1b3 + carry + (lo % 2 ^ 24) * 2 ^ 8) % 2 ^ 32
        lo = new_lo
    end
    return string.format("%08x%08x", hi, lo)
end

describe("moonshard.partition", function()
    describe("hex", function()
        -- Published FNV-1a 64 vectors (isthe.com/chongo/src/fnv/test_fnv.c).
        local vectors = {
            { "", "cbf29ce484222325" },
            { "a", "af63dc4c8601ec8c" },
            { "b", "af63df4c8601f1a5" },
            { "c", "af63de4c8601eff2" },
            { "fo", "08985907b541d342" },
            { "foo", "dcb27518fed9d577" },
            { "foob", "dd120e790c2512af" },
            { "fooba", "cac165afa2fef40a" },
            { "foobar", "85944171f73967e8" },
            { "chongo was here!\n", "46810940eff5f915" },
        }
        for _, v in ipairs(vectors) do
            it(string.format("hashes %q to %s", v[1], v[2]), function()
                assert.equal(v[2], partition.hex(v[1]))
            end)
        end

        it("hashes bytes >= 0x80 and NULs as unsigned bytes", function()
            local s = "\255\128\0\1caf\195\169"
            assert.equal(reference_hex(s), partition.hex(s))
        end)

        it("matches the reference on ids of many lengths", function()
            local s = ""
            for n = 1, 200 do
                s = s .. string.char((n * 37) % 256)
                assert.equal(reference_hex(s), partition.hex(s))
            end
        end)
    end)

    describe("hash", function()
        it("returns a uint64_t cdata", function()
            local ffi = require "ffi"
            local h = partition.hash("foobar")
            assert.equal("cdata", type(h))
            assert.is_true(ffi.istype("uint64_t", h))
            assert.is_true(h == 0x85944171f73967e8ULL)
        end)
    end)

    describe("shard", function()
        it("returns the hash modulo the count", function()
            -- 0x85944171f73967e8 == 9625390261332436968
            assert.equal(968, partition.shard("foobar", 1000))
            assert.equal(0xe8, partition.shard("foobar", 256))
        end)

        it("returns a Lua number in [0, count)", function()
            for _, count in ipairs({ 1, 2, 7, 64, 65536, 2 ^ 31 }) do
                for i = 1, 200 do
                    local s = partition.shard("entity-" .. i, count)
                    assert.equal("number", type(s))
                    assert.is_true(s >= 0 and s < count and s % 1 == 0)
                end
            end
        end)

        it("is 0 for every id when there is one shard", function()
            assert.equal(0, partition.shard("anything", 1))
        end)

        it("spreads ids over all shards", function()
            local seen, distinct = {}, 0
            for i = 1, 2000 do
                local s = partition.shard("order-" .. i, 64)
                if not seen[s] then
                    seen[s] = true
                    distinct = distinct + 1
                end
            end
            assert.equal(64, distinct)
        end)
    end)

    describe("argument errors", function()
        it("rejects a non-string id in every function", function()
            for _, fn in ipairs({ partition.hash, partition.hex }) do
                assert.has_error(function() fn(42) end,
                    "bad 'id' argument (string expected, got number)")
            end
            assert.has_error(function() partition.shard(nil, 8) end,
                "bad 'id' argument (string expected, got nil)")
        end)

        it("rejects a count that is not an integer in [1, 2^31]", function()
            for _, count in ipairs({ 0, -1, 1.5, 2 ^ 31 + 1, 0 / 0,
                                     math.huge }) do
                assert.has_error(function() partition.shard("a", count) end)
            end
            assert.has_error(function() partition.shard("a", "8") end,
                "bad 'count' argument (integer in [1, 2^31] expected, got string)")
        end)

        it("blames the caller's line", function()
            local ok, err = pcall(function()
                local s = partition.shard("a", 0)
                return s
            end)
            assert.is_false(ok)
            assert.matches("partition_spec%.lua:%d+: bad 'count'", err)
            ok, err = pcall(function()
                local h = partition.hex({})
                return h
            end)
            assert.is_false(ok)
            assert.matches("partition_spec%.lua:%d+: bad 'id'", err)
        end)
    end)
end)

-- The C partitioner (`moonshard shard`) against moonshard.partition and the
-- published FNV-1a 64 vectors: both sides must route every id to the same
-- shard (DESIGN.md §3, "Partitioner").

local helpers = require "helpers.node"
local partition = require "moonshard.partition"

local char, format = string.char, string.format

-- Random ids are reproducible: set MOONSHARD_SEED to replay a failure.
local SEED = tonumber(os.getenv("MOONSHARD_SEED") or "") or os.time()

-- Published FNV-1a 64 vectors (isthe.com/chongo/src/fnv/test_fnv.c), as
-- uint64 literals, independent of both implementations under test.
local VECTORS = {
    { "", 0xcbf29ce484222325ULL },
    { "a", 0xaf63dc4c8601ec8cULL },
    { "b", 0xaf63df4c8601f1a5ULL },
    { "c", 0xaf63de4c8601eff2ULL },
    { "fo", 0x08985907b541d342ULL },
    { "foo", 0xdcb27518fed9d577ULL },
    { "foob", 0xdd120e790c2512afULL },
    { "fooba", 0xcac165afa2fef40aULL },
    { "foobar", 0x85944171f73967e8ULL },
    { "chongo was here!\n", 0x46810940eff5f915ULL },
}

-- Counts: 1, small, prime, powers of two, the largest the C side takes.
local COUNTS = { 1, 2, 3, 7, 64, 256, 1000, 65521, 65536, 1000003,
                 2147483647 }

-- Runs `moonshard shard --count N -- ids...`; returns the shards as numbers.
local function c_shards(count, ids)
    local argv = { helpers.bin, "shard", "--count", tostring(count), "--" }
    for i, id in ipairs(ids) do
        argv[5 + i] = id
    end
    local code, out, err = helpers.run(argv)
    assert(code == 0, format("moonshard shard exited %s: %s", tostring(code),
                             err))
    local shards = {}
    for line in out:gmatch("[^\n]+") do
        shards[#shards + 1] = tonumber(line)
    end
    return shards
end

-- One UTF-8 character of a random code point in `lo..hi` (no surrogates).
local function utf8_char(cp)
    if cp < 0x80 then
        return char(cp)
    elseif cp < 0x800 then
        return char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40)
    elseif cp < 0x10000 then
        return char(0xE0 + math.floor(cp / 0x1000),
                    0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
    end
    return char(0xF0 + math.floor(cp / 0x40000),
                0x80 + math.floor(cp / 0x1000) % 0x40,
                0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

-- Ids a process argument can carry: any bytes but NUL, 1 to 64 of them;
-- every third one valid UTF-8 over all planes, every third one ASCII-ish.
local function random_ids(n)
    local ids = {}
    for i = 1, n do
        local parts = {}
        local len = math.random(1, 64)
        if i % 3 == 0 then
            for j = 1, math.random(1, 16) do
                local cp
                repeat
                    local plane = math.random(1, 4)
                    cp = plane == 1 and math.random(1, 0x7F)
                        or plane == 2 and math.random(0x80, 0x7FF)
                        or plane == 3 and math.random(0x800, 0xFFFF)
                        or math.random(0x10000, 0x10FFFF)
                until cp < 0xD800 or cp > 0xDFFF
                parts[j] = utf8_char(cp)
            end
        elseif i % 3 == 1 then
            for j = 1, len do
                parts[j] = char(math.random(1, 255))
            end
        else
            parts[1] = format("entity-%d-%d", i, math.random(0, 1e9))
        end
        ids[i] = table.concat(parts)
    end
    return ids
end

describe("moonshard shard", function()
    teardown(function()
        helpers.cleanup()
        assert.same({}, helpers.leaks())
    end)

    it("agrees with moonshard.partition on thousands of random ids",
       function()
        math.randomseed(SEED)
        local ids = random_ids(3000)
        for _, count in ipairs(COUNTS) do
            local got = c_shards(count, ids)
            assert.equal(#ids, #got, "one line per id")
            for i, id in ipairs(ids) do
                local want = partition.shard(id, count)
                if got[i] ~= want then
                    error(format("seed %d, count %d, id %q: C says %s, "
                                 .. "Lua says %d", SEED, count, id,
                                 tostring(got[i]), want))
                end
            end
        end
    end)

    it("computes the published FNV-1a 64 vectors modulo each count",
       function()
        local ids = {}
        for i, v in ipairs(VECTORS) do
            ids[i] = v[1]
        end
        for _, count in ipairs(COUNTS) do
            local got = c_shards(count, ids)
            for i, v in ipairs(VECTORS) do
                local want = tonumber(v[2] % count)
                assert.equal(want, got[i], format("%q %% %d", v[1], count))
                assert.equal(want, partition.shard(v[1], count))
            end
        end
    end)

    it("prints the low 16 bits of the hash for 65536 shards", function()
        local got = c_shards(65536, { "foobar", "a" })
        assert.same({ 0x67e8, 0xec8c }, got)
    end)

    it("takes an id that starts with a dash after --", function()
        local got = c_shards(1000, { "--count", "-x" })
        assert.same({ partition.shard("--count", 1000),
                      partition.shard("-x", 1000) }, got)
    end)

    describe("usage errors", function()
        local cases = {
            { "no arguments", {} },
            { "no count", { "a", "b" } },
            { "no ids", { "--count", "8" } },
            { "a count of 0", { "--count", "0", "a" } },
            { "a negative count", { "--count", "-3", "a" } },
            { "a count that is not a number", { "--count", "eight", "a" } },
            { "a count with trailing junk", { "--count", "8x", "a" } },
            { "a count above 2^31 - 1", { "--count", "2147483648", "a" } },
            { "--count without a value", { "--count" } },
        }
        for _, case in ipairs(cases) do
            it("exits 2 with a message on stderr for " .. case[1], function()
                local code, out, err = helpers.moonshard("shard",
                                                         unpack(case[2]))
                assert.equal(2, code)
                assert.equal("", out)
                assert.matches("moonshard shard", err)
            end)
        end
    end)
end)

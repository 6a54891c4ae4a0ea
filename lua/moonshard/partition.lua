-- moonshard.partition: the default partitioner.
--
-- shard = fnv1a64(id bytes) % shard_count, shards numbered from 0. The C host
-- computes the same function; spec/01-unit/partition_spec.lua pins it to the
-- published FNV-1a test vectors so both sides can be checked against them.
--
-- The hash runs on uint64_t cdata: LuaJIT 2.1's bit.bxor keeps 64-bit cdata
-- arguments 64-bit, and uint64_t multiplication wraps modulo 2^64, which is
-- exactly FNV's arithmetic. Once the loop is compiled it allocates nothing.

local bit = require "bit"

local bxor = bit.bxor
local tohex = bit.tohex
local byte = string.byte
local type = type
local tonumber = tonumber
local error = error
local floor = math.floor
local tostring = tostring

local OFFSET_BASIS = 0xcbf29ce484222325ULL
local PRIME = 0x100000001b3ULL
local MAX_COUNT = 2 ^ 31

local M = {}

local function fnv1a64(id)
    local h = OFFSET_BASIS
    for i = 1, #id do
        h = bxor(h, byte(id, i)) * PRIME
    end
    return h
end

local function check_id(id)
    if type(id) ~= "string" then
        error("bad 'id' argument (string expected, got " .. type(id) .. ")", 3)
    end
end

-- Returns the 64-bit FNV-1a hash of `id` as a uint64_t cdata.
function M.hash(id)
    check_id(id)
    return fnv1a64(id)
end

-- Returns the hash as 16 lowercase hex digits.
function M.hex(id)
    check_id(id)
    return tohex(fnv1a64(id))
end

-- Returns the shard of `id` among `count` shards: a Lua number in
-- [0, count). `count` must be an integer in [1, 2^31].
function M.shard(id, count)
    check_id(id)
    if type(count) ~= "number" or count < 1 or count > MAX_COUNT
        or floor(count) ~= count then
        error("bad 'count' argument (integer in [1, 2^31] expected, got "
              .. (type(count) == "number" and tostring(count) or type(count))
              .. ")", 2)
    end
    return tonumber(fnv1a64(id) % count)
end

return M

-- G2 on one node: concurrent senders (separate curl processes, each one
-- sequential stream of tells over keep-alive) load many entities of one
-- shard; every entity sees every sender's messages in send order, and the
-- shard hands one sender's stream to its entities in acceptance order.
-- Then one pipelined stream (all requests in one write on one connection).

local helpers = require "helpers.node"
local partition = require "moonshard.partition"

local format = string.format

local SHARDS = 16
local SHARD = 5         -- the shard under load
local IDS = 12          -- entities of that shard
local SENDERS = 6       -- concurrent curl processes
local MESSAGES = 300    -- per sender

-- The first `n` ids "fifo-K" whose shard is `shard`.
local function ids_of_shard(shard, n)
    local ids, k = {}, 0
    while #ids < n do
        k = k + 1
        local id = "fifo-" .. k
        if partition.shard(id, SHARDS) == shard then
            ids[#ids + 1] = id
        end
    end
    return ids
end

-- A curl config that sends `sender`'s MESSAGES tells in order, one after
-- the other, writing each status on its own line. Message g goes to
-- ids[(g - 1) % #ids + 1] as that sender's n-th message to that entity.
local function curl_config(n, sender, ids)
    local parts = {}
    for g = 1, MESSAGES do
        local i = (g - 1) % #ids + 1
        local msg = helpers.json.encode({
            type = "seq", sender = sender, g = g,
            n = math.floor((g - 1) / #ids) + 1,
        })
        parts[#parts + 1] = format(
            "url = %q\ndata-binary = %q\noutput = \"/dev/null\"\n"
            .. "header = \"Content-Type: application/json\"\n"
            .. "write-out = \"%%{http_code}\\n\"\n",
            n.base .. helpers.entity_path("Seq", ids[i], "tell"), msg)
    end
    return table.concat(parts, "next\n")
end

describe("per-shard FIFO under load", function()
    local n, ids, statuses, senders

    lazy_setup(function()
        n = helpers.start({
            entities = { Seq = { module = "seq", shard_count = SHARDS } },
        })
        ids = ids_of_shard(SHARD, IDS)
        local before = n:stats()
        local dir = helpers.tmpdir()
        local procs = {}
        senders = {}
        for s = 1, SENDERS do
            local sender = "sender-" .. s
            senders[s] = sender
            local cfg = format("%s/%s.curl", dir, sender)
            helpers.write_file(cfg, curl_config(n, sender, ids))
            procs[s] = helpers.spawn(
                { "curl", "-s", "-S", "--max-time", "60", "-K", cfg },
                { stdout = cfg .. ".out", stderr = cfg .. ".err" })
        end
        statuses = {}
        for s, p in ipairs(procs) do
            assert(p:wait(60), "sender " .. s .. " did not finish")
            local counts = {}
            local out = helpers.read_file(format("%s/%s.curl.out", dir,
                                                 senders[s]))
            for code in out:gmatch("%d+") do
                counts[code] = (counts[code] or 0) + 1
            end
            statuses[s] = counts
        end
        n:settle(before.delivered + SENDERS * MESSAGES)
    end)

    lazy_teardown(function()
        helpers.stop_all_checked()
        assert.same({}, helpers.leaks())
    end)

    it("accepts every tell of every concurrent sender", function()
        for s = 1, SENDERS do
            assert.same({ ["202"] = MESSAGES }, statuses[s])
        end
    end)

    it("hands each entity every sender's messages in send order", function()
        local total = 0
        for i, id in ipairs(ids) do
            local r = n:call("Seq", id, { type = "report" })
            assert.same({ count = r.count, gaps = 0, reorders = 0 },
                        { count = r.count, gaps = r.gaps,
                          reorders = r.reorders }, r.first_problem)
            -- each sender sends every #ids-th message to this entity
            local per_sender = math.floor((MESSAGES - i) / #ids) + 1
            assert.equal(SENDERS * per_sender, r.count, id)
            total = total + r.count
        end
        assert.equal(SENDERS * MESSAGES, total)
    end)

    it("handles one sender's stream across a shard's entities in "
       .. "acceptance order", function()
        for _, sender in ipairs(senders) do
            local j = n:call("Seq", ids[1], { type = "journal",
                                              sender = sender })
            assert.equal(MESSAGES, j.count, sender)
            assert.equal(0, j.breaks, j.first_break)
            -- the entities saw the shard the Lua partitioner predicted
            assert.same({ SHARD }, j.shards)
        end
    end)

    it("answers a pipelined stream in order and handles it in that order",
       function()
        local reqs, count = {}, 400
        for g = 1, count do
            local id = ids[(g - 1) % #ids + 1]
            reqs[g] = helpers.format_request(n.port, "POST",
                helpers.entity_path("Seq", id, "tell"),
                { type = "seq", sender = "pipe", g = g,
                  n = math.floor((g - 1) / #ids) + 1 })
        end
        -- behind the tells, in the same shard: the journal of the stream
        reqs[count + 1] = helpers.format_request(n.port, "POST",
            helpers.entity_path("Seq", ids[#ids], "ask"),
            { type = "journal", sender = "pipe" }, true)
        local responses, why = helpers.pipeline(n.port, reqs)
        assert.equal(count + 1, #responses, why)
        for g = 1, count do
            assert.equal(202, responses[g].status, responses[g].raw)
        end
        local j = responses[count + 1]
        assert.equal(200, j.status, j.raw)
        -- handled in order, and all of them before the ask that followed
        assert.same({ count = count, breaks = 0, shards = { SHARD } },
                    { count = j.body.count, breaks = j.body.breaks,
                      shards = j.body.shards })
    end)
end)

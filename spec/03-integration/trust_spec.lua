-- G8 on a real node: a peer that knows the cluster secret but is no
-- member (spec/c/rogue_peer.c, built beside the node) sends REPLY frames
-- for every ask id in a range. Only the node an ask was sent to may answer
-- it, so a local ask keeps its own reply, and the strays are counted.
-- (Before, any authenticated peer could end any pending ask; a review of
-- the router noted it.)

local helpers = require "helpers.node"
local logline = require "helpers.logline"

local ROGUE = helpers.bin:gsub("moonshard$", "rogue_peer")

describe("answers from a node an ask was not sent to", function()
    local c, n

    setup(function()
        c = helpers.cluster_up({
            size = 1,
            entities = { Sleeper = { module = "sleeper", shard_count = 4 } },
        })
        n = c:node("n1")
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    it("do not end the ask, and are counted", function()
        local before = n:stats().stray_answers
        -- replies for ask ids 1..2000, sent while the ask below waits
        local rogue = helpers.spawn({ ROGUE, "spec", c.secret,
                                      n.listen, "12", "1", "2000",
                                      '{"hijacked":true}', "700" })
        local status, body, raw = n:ask("Sleeper", "s1",
                                        { type = "nap", seconds = 2 }, 10)
        assert.is_true(rogue:wait(10), "the rogue peer did not stop")
        assert.equal(0, rogue.code, "the rogue peer did not get through "
                     .. "the handshake")
        assert.equal(200, status, raw)
        assert.is_nil(body.hijacked, raw)
        assert.equal(2, body.slept)
        local after = n:stats()
        assert.is_true(after.stray_answers - before >= 2000,
                       "strays counted: " .. (after.stray_answers - before))
        -- logged, but not once each: at powers of two of the counter,
        -- whose name the line gives
        local strays, lines = after.stray_answers, 0
        for line in helpers.read_file(n.log_path):gmatch("[^\n]+") do
            local rec = logline.parse(line)
            if rec and rec.level == "WARN"
                and rec.msg:find("stray_answers", 1, true) then
                lines = lines + 1
            end
        end
        assert.is_true(lines >= 1 and lines <= 1 + math.log(strays)
                       / math.log(2), lines .. " lines for " .. strays)
    end)
end)

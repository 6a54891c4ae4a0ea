-- spec/05-nemesis/run_spec.lua: the nemesis harness end to end
-- (nemesis/run, issue 13), short: a run without faults records the Seq
-- entities' activations and passes; a run with a pg_kill of one node and
-- a broken strategy reload (refused by the coordinator's dry run, then
-- a good one) passes. nemesis/run stops every process it starts by PID.

local node = require "helpers.node"
local cjson = require "cjson"

-- the output and exit status of a shell command
local sh = require "helpers.sh"

describe("nemesis/run", function()
    it("without faults passes, with activation records of the Seq "
       .. "entities in its history", function()
        local dir = node.tmpdir() .. "/run"
        local out, rc = sh("nemesis/run --seed 1 --faults 0 --keep " .. dir)
        assert.equal(0, rc, out)
        local acts = 0
        for line in io.lines(dir .. "/history.jsonl") do
            if line:find('"kind":"activation"', 1, true) then
                local a = cjson.decode(line)
                acts = acts + 1
                assert.equal("Seq", a.type)
                assert.matches("^n%d$", a.node)
                assert.is_string(a.act)
                assert.is_true(a.start <= a["end"])
            end
        end
        assert.is_true(acts >= 1, out)
        assert.matches("activations: " .. acts .. " records", out, 1, true)
        os.execute("rm -rf '" .. dir .. "'")
    end)

    it("passes a pg_kill of one node and a broken reload before a good "
       .. "one", function()
        -- seed 83 (netns mode, whose schedule draws the partition kinds
        -- too): pg_kill n3, then reload after a broken (raise_call)
        local plan = sh("nemesis/run --seed 83 --faults 2 --plan")
        assert.matches("pg_kill n3 for", plan, 1, true)
        assert.matches("after a broken (raise_call)", plan, 1, true)
        local out, rc = sh("nemesis/run --seed 83 --faults 2")
        assert.equal(0, rc, out)
        assert.matches("reload 1, pg_kill 1", out, 1, true)
        local ended = tonumber(out:match("pg_kill: (%d+) backend"))
        assert.is_true(ended and ended > 0, out)
        assert.not_matches("harness problems", out, 1, true)
    end)
end)

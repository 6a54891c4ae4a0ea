-- nemesis/long --summarize: the long form's totals over runs' logs.

local sh = require "helpers.sh"

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
end

describe("nemesis/long --summarize", function()
    local dir
    before_each(function()
        dir = os.tmpname()
        os.remove(dir)
        os.execute("mkdir -p " .. dir)
    end)
    after_each(function() os.execute("rm -rf " .. dir) end)

    local ok_log = [[
nemesis: seed 4, 3 faults, 4 clients, netns
  1 t=2.0s pause n1 for 1.0s on n1: serves again after 0.10s
  2 t=4.0s isolate n2 for 5.0s: serves again after 3.00s
  3 t=9.0s kill n3 for 1.0s on n3: serves again after 1.00s
faults: pause 1, kill 1, isolate 1
calls: 1000; journal rows: 10; history and journal in /tmp/x
OK: 1000 calls, 8 registers (10 search steps), 5 events, 5 operations, ]]
        .. "0 activations, 3 faults; 0 violation(s), 0 undecided\n"

    it("sums the faults by kind, the calls and the recoveries of the runs",
       function()
        write(dir .. "/a.log", ok_log)
        write(dir .. "/b.log", (ok_log:gsub("seed 4", "seed 5")
            :gsub("after 3.00s", "after 5.00s")))
        local out, rc = sh("nemesis/long --summarize " .. dir .. "/a.log "
                           .. dir .. "/b.log")
        assert.equal(0, rc, out)
        assert.matches("runs: 2; faults: 6 %(isolate 2, kill 2, pause 2%)",
                       out)
        assert.matches("calls: 2000; violations: 0", out)
        assert.matches("recovery %(s%): p50 1.00, p99 5.00, max 5.00 "
                       .. "over 6 faults", out)
    end)

    it("fails and names the replay of a run with a violation or without "
       .. "a verdict", function()
        write(dir .. "/a.log", ok_log)
        write(dir .. "/bad.log", (ok_log:gsub("\nOK: ", "\nVIOLATIONS: ")
            :gsub("0 violation%(s%)", "2 violation(s)")
            .. "replay: nemesis/run --seed 4 --faults 3\n"))
        write(dir .. "/cut.log", "nemesis: seed 6, 3 faults\n")
        local out, rc = sh("nemesis/long --summarize " .. dir .. "/a.log "
                           .. dir .. "/bad.log " .. dir .. "/cut.log")
        assert.equal(1, rc, out)
        assert.matches("violations: 2", out)
        assert.matches("FAILED [^\n]*bad.log: replay: nemesis/run %-%-seed 4 "
                       .. "%-%-faults 3", out)
        assert.matches("FAILED [^\n]*cut.log", out)
    end)

    it("refuses bad options with exit 2", function()
        for _, a in ipairs({ "--bogus", "--seeds x", "--faults -1",
                             "--summarize" }) do
            local _, rc = sh("nemesis/long " .. a)
            assert.equal(2, rc, a)
        end
    end)
end)

describe("nemesis/long", function()
    it("names the run's options in the replay of a run that printed none",
       function()
        -- a copy of nemesis/long beside a nemesis/run that dies at once,
        -- before it could print its own replay line
        local dir = os.tmpname()
        os.remove(dir)
        os.execute("mkdir -p " .. dir .. "/nemesis")
        os.execute("cp nemesis/long " .. dir .. "/nemesis/long")
        write(dir .. "/nemesis/run", "#!/bin/sh\nexit 2\n")
        os.execute("chmod +x " .. dir .. "/nemesis/run")
        local out, rc = sh(dir .. "/nemesis/long --seeds 4 --faults 3 "
                           .. "--logs " .. dir .. "/logs -- --loopback "
                           .. "--clients 2")
        os.execute("rm -rf " .. dir)
        assert.equal(1, rc, out)
        assert.matches("replay: nemesis/run --seed 4 --faults 3 "
                       .. "'--loopback' '--clients' '2'\n", out, 1, true)
    end)
end)

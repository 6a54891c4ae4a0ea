-- spec/05-nemesis/run_errors_spec.lua: nemesis/run (issue 13)
-- where a run goes wrong: options it must refuse before it starts
-- anything, the replay line of a failed run (every option that shapes the
-- run, so that the line really replays it), and a run whose clients made
-- no calls, which must fail rather than pass having checked nothing.
-- The runs here use --loopback (127.0.0.1): no namespaces.

local node = require "helpers.node"
local cjson = require "cjson"

-- the output and exit status of a shell command
local sh = require "helpers.sh"

describe("nemesis/run refuses", function()
    it("a seed with a fraction (the replay line would cut it off)",
       function()
        local out, rc = sh("nemesis/run --seed 1.5 --faults 3 --plan")
        assert.equal(2, rc, out)
        assert.matches("--seed must be an integer", out, 1, true)
        assert.not_matches("t=%d", out)
    end)

    it("a --keep folder of an earlier run, before it starts anything",
       function()
        local dir = node.tmpdir() .. "/old"
        os.execute("mkdir -p '" .. dir .. "'")
        -- what a finished run leaves: its stop file ended the new run's
        -- clients at once, and the run passed with 0 calls
        node.write_file(dir .. "/stop", "stop\n")
        local out, rc = sh("nemesis/run --loopback --seed 7 --faults 0 "
                           .. "--keep " .. dir)
        assert.equal(2, rc, out)
        assert.matches("--keep " .. dir .. ": it is not empty", out, 1,
                       true)
        assert.not_matches("nemesis: seed", out, 1, true)
    end)

    it("a --keep folder it cannot make", function()
        local file = node.tmpdir() .. "/a-file"
        node.write_file(file, "x\n")
        local out, rc = sh("nemesis/run --loopback --faults 0 --keep "
                           .. file .. "/sub")
        assert.equal(2, rc, out)
        assert.matches("cannot be made or written to", out, 1, true)
        out, rc = sh("nemesis/run --loopback --faults 0 --keep " .. file)
        assert.equal(2, rc, out)
        assert.matches("exists and is not a folder", out, 1, true)
    end)
end)

describe("nemesis/run failing", function()
    it("prints a replay line with every option of the run", function()
        local dir = node.tmpdir() .. "/fail"
        local out, rc = sh("MOONSHARD_BIN=/nonexistent/moonshard "
            .. "nemesis/run --loopback --seed 7 --clients 3 --faults 2 "
            .. "--keep " .. dir)
        assert.equal(2, rc, out)
        assert.matches("the harness failed", out, 1, true)
        assert.matches("\nreplay: nemesis/run --seed 7 --faults 2 "
                       .. "--clients 3 --loopback\n", out, 1, true)
        assert.matches("folder, kept: " .. dir, out, 1, true)
    end)

    it("fails a run whose clients made no calls", function()
        -- a luajit that ends every client at once and runs the rest
        local real = sh("command -v luajit"):match("[^\n]+")
        local bin = node.tmpdir() .. "/bin"
        os.execute("mkdir -p '" .. bin .. "'")
        node.write_file(bin .. "/luajit", "#!/bin/sh\n"
            .. "case \"$1\" in */nemesis/client.lua) exit 0 ;; esac\n"
            .. "exec '" .. real .. "' \"$@\"\n")
        os.execute("chmod +x '" .. bin .. "/luajit'")
        local dir = node.tmpdir() .. "/idle"
        local out, rc = sh("PATH='" .. bin .. "':$PATH nemesis/run "
            .. "--loopback --seed 3 --faults 0 --clients 2 --keep " .. dir)
        assert.equal(1, rc, out)
        assert.matches("client c1 ended before the stop", out, 1, true)
        assert.matches("client c2 recorded no call", out, 1, true)
        assert.matches("\nreplay: nemesis/run --seed 3 --faults 0 "
                       .. "--clients 2 --loopback\n", out, 1, true)
    end)

    it("takes the Seq entities' reports before each fault, not only at "
       .. "the end (a fault ends activations, and their counts)", function()
        local dir = node.tmpdir() .. "/reports"
        -- seed 3: two moves
        local out, rc = sh("nemesis/run --loopback --seed 3 --faults 2 "
                           .. "--keep " .. dir)
        assert.equal(0, rc, out)
        local at = {}
        for line in io.lines(dir .. "/history.jsonl") do
            if line:find('"kind":"seq_report"', 1, true) then
                local r = cjson.decode(line)
                at[r.at] = (at[r.at] or 0) + 1
                assert.is_number(r.value.reorders)
            end
        end
        assert.same({ ["before fault 1"] = 4, ["before fault 2"] = 4,
                      ["end"] = 4 }, at)
    end)

    it("stopped by SIGTERM in --loopback mode stops what it started",
       function()
        -- the children of a process (their PIDs), from /proc
        local function children(pid)
            local out = {}
            local p = io.popen("grep -l '^PPid:[[:space:]]*" .. pid
                               .. "$' /proc/[0-9]*/status 2>/dev/null")
            for line in p:lines() do
                out[#out + 1] = tonumber(line:match("/proc/(%d+)/"))
            end
            p:close()
            return out
        end
        local dir = node.tmpdir()
        local proc = node.spawn({ "luajit", "nemesis/run", "--loopback",
            "--seed", "1", "--faults", "0", "--keep", dir .. "/work" },
            { stdout = dir .. "/out" })
        -- PostgreSQL, then the 5 nodes, then the clients
        local seen = {}
        node.wait_until(function()
            for _, c in ipairs(children(proc.pid)) do seen[c] = true end
            local n = 0
            for _ in pairs(seen) do n = n + 1 end
            return n >= 6 or proc:poll()
        end, 60, "the harness's processes")
        proc:send_signal(node.SIGTERM)
        local exited = proc:wait(30)
        local left = {}
        pcall(node.wait_until, function()
            left = {}
            for pid in pairs(seen) do
                if node.pid_alive(pid) then left[#left + 1] = pid end
            end
            return #left == 0
        end, 15, "the harness's processes to end", 0.2)
        for _, pid in ipairs(left) do -- what the run left: by its PID
            os.execute("kill -9 " .. pid)
        end
        local out = node.read_file(dir .. "/out") or ""
        assert.truthy(exited, out)
        assert.same({}, left, out)
        assert.equal(2, proc.code, out)
        assert.matches("replay: nemesis/run --seed 1 --faults 0 "
                       .. "--loopback", out, 1, true)
    end)
end)

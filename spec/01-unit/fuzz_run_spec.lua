-- spec/01-unit/fuzz_run_spec.lua: fuzz/run's verdicts, against stand-in
-- targets (shell scripts in a fake build folder, MS_FUZZ_BUILD, and a
-- cmake on PATH that builds nothing): the time bound it passes, and a
-- failing target named with its input, or with its log when libFuzzer
-- wrote no input.

local sh = require "helpers.sh"

local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    os.execute("chmod +x '" .. path .. "'")
end

describe("fuzz/run", function()
    local dir, env
    before_each(function()
        dir = os.tmpname()
        os.remove(dir)
        os.execute("mkdir -p " .. dir .. "/bin " .. dir .. "/build/fuzz")
        write(dir .. "/build/CMakeCache.txt", "")
        write(dir .. "/bin/cmake", "#!/bin/sh\nexit 0\n")
        write(dir .. "/build/fuzz/fuzz_seeds", "#!/bin/sh\nexit 0\n")
        env = "PATH=" .. dir .. "/bin:$PATH MS_FUZZ_BUILD=" .. dir
            .. "/build "
    end)
    after_each(function() os.execute("rm -rf " .. dir) end)

    it("passes the time bound to every target", function()
        for _, t in ipairs({ "frame", "auth" }) do
            write(dir .. "/build/fuzz/fuzz_" .. t, "#!/bin/sh\necho \"$@\" > "
                  .. dir .. "/" .. t .. ".args\n")
        end
        local out, rc = sh(env .. "fuzz/run -t 3 frame auth")
        assert.equal(0, rc, out)
        assert.matches("frame auth: no crash in 3s each", out, 1, true)
        for _, t in ipairs({ "frame", "auth" }) do
            local f = assert(io.open(dir .. "/" .. t .. ".args"))
            local args = f:read("*a")
            f:close()
            assert.matches("-max_total_time=3 ", args, 1, true)
        end
        local _, rc0 = sh(env .. "fuzz/run -t 0 frame")
        assert.equal(2, rc0)
    end)

    it("fails at a crash, naming the target and the input", function()
        write(dir .. "/build/fuzz/fuzz_frame", "#!/bin/sh\n"
              .. "echo 'artifact_prefix=x; Test unit written to "
              .. "/tmp/x/crash-0abc'\nexit 1\n")
        write(dir .. "/build/fuzz/fuzz_auth", "#!/bin/sh\ntouch " .. dir
              .. "/auth.ran\n")
        local out, rc = sh(env .. "fuzz/run -t 1 frame auth")
        assert.equal(1, rc, out)
        assert.matches("frame FAILED (exit 1); input: /tmp/x/crash-0abc",
                       out, 1, true)
        assert.matches("replay with: " .. dir
                       .. "/build/fuzz/fuzz_frame /tmp/x/crash-0abc", out,
                       1, true)
        assert.is_nil(io.open(dir .. "/auth.ran"))
    end)

    it("names the target and its log when no input was written",
       function()
        write(dir .. "/build/fuzz/fuzz_jsoncheck", "#!/bin/sh\n"
              .. "echo '==1== ERROR: libFuzzer: deadly signal'\nexit 77\n")
        local out, rc = sh(env .. "fuzz/run -t 1 jsoncheck")
        assert.equal(1, rc, out)
        assert.matches("jsoncheck FAILED (exit 77); input: see " .. dir
                       .. "/build/fuzz-out/jsoncheck.log", out, 1, true)
        assert.matches("ERROR: libFuzzer: deadly signal", out, 1, true)
    end)
end)

-- The sanitizer check of the helpers (.ci/sanitize): a sanitizer report
-- written by a process a spec file started fails its teardown
-- (stop_all_checked), even when that process ended by itself with status
-- 0 (a report the process survived, or one it wrote on its way out).
-- The processes here are shells printing what ASan, LSan and UBSan print.
local helpers = require "helpers.node"
local node_proc = require "helpers.node_proc"

-- Runs `script` with sh, its stdout and stderr into a log in a temp dir
-- of this spec file (like a node's log), and waits for its end.
local function run_logged(script)
    local log = helpers.tmpdir() .. "/node.log"
    local p = helpers.spawn({ "sh", "-c", script },
                            { stdout = log, stderr = "stdout" })
    assert.is_true(p:wait(10))
    assert.equal(0, p.code)
    return log
end

describe("the sanitizer check of stop_all_checked", function()
    after_each(function()
        helpers.stop_all() -- whatever a test left
    end)

    it("passes when no log holds a report", function()
        run_logged("echo 'moonshard: node n1 is up'; " ..
                   "echo 'level=error msg=\"handler raised: runtime " ..
                   "error: boom\"'")
        assert.same({}, node_proc.sanitizer_reports())
        helpers.stop_all_checked()
    end)

    it("fails on UBSan's runtime error, naming the file and the report",
       function()
        local log = run_logged(
            "echo 'moonshard: node n1 is up'; " ..
            "echo 'runtime/core/frame.c:47:21: runtime error: left shift " ..
            "of 200 by 24 places cannot be represented in type int' >&2; " ..
            "echo '    #0 0x55 in ms_frame_decode runtime/core/frame.c:47'")
        local ok, err = pcall(helpers.stop_all_checked)
        assert.is_false(ok)
        assert.matches("sanitizer reports", err, 1, true)
        assert.matches(log, err, 1, true)
        -- the report from its first line: not the lines before it
        assert.matches("\nruntime/core/frame.c:47:21: runtime error: left",
                       err, 1, true)
        assert.matches("ms_frame_decode", err, 1, true)
        assert.not_matches("is up", err, 1, true)
    end)

    it("fails on ASan's and LSan's ERROR lines", function()
        for _, line in ipairs({
            "==123==ERROR: AddressSanitizer: heap-use-after-free on address",
            "==124==ERROR: LeakSanitizer: detected memory leaks",
        }) do
            run_logged("echo '" .. line .. "'")
            local ok, err = pcall(helpers.stop_all_checked)
            assert.is_false(ok)
            assert.matches(line, err, 1, true)
        end
    end)

    it("finds a report in the log of an earlier incarnation too", function()
        local dir = helpers.tmpdir()
        helpers.write_file(dir .. "/n1.1.log",
                           "==9==ERROR: LeakSanitizer: detected memory "
                           .. "leaks\n")
        helpers.write_file(dir .. "/n1.2.log", "moonshard: node n1 is up\n")
        local reports = node_proc.sanitizer_reports()
        assert.equal(1, #reports)
        assert.matches(dir .. "/n1.1.log:\n==9==ERROR: LeakSanitizer",
                       reports[1], 1, true)
    end)
end)

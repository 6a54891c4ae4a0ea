-- Runs a shell command line, stdout and stderr together; returns its
-- output and its exit status. For specs of the repository's scripts
-- (nemesis/run, nemesis/long, fuzz/run, .ci/run):
--
--     local sh = require "helpers.sh"
--     local out, rc = sh("nemesis/run --plan --seed 3")
return function(cmd)
    local f = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
    local out = f:read("*a")
    f:close()
    local rc = tonumber(out:match("rc=(%d+)\n$"))
    return (out:gsub("rc=%d+\n$", "")), rc
end

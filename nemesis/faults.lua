-- nemesis/faults.lua: the parts of two faults of nemesis/run that are not
-- process signals (nemesis/README.md, "Running the harness"):
--
-- * `reload`: the text of the strategy file the nodes hot-reload
--   (nemesis/strategy.lua with other weights, or a broken version), its
--   atomic rewrite, and the reload lines of a node's log;
-- * `pg_kill`: the PostgreSQL backends of the nodes (all, or those of one
--   node process, told by the client port of each of its connections),
--   ended with pg_terminate_backend.

local format = string.format

local M = {}

M.STRATEGY_FILE = "nemesis_strategy.lua" -- in the cluster dir

-- The kinds of broken strategy file a reload may write: a syntax error,
-- a module that raises while the config is evaluated, and a strategy
-- whose allocate and rebalance raise (refused by the coordinator's dry
-- run; the other nodes only check its shape, README "Hot reload").
M.BROKEN = { "syntax", "raise_load", "raise_call" }

-- The strategy file's text: `template` (nemesis/strategy.lua) with the
-- weights of n1..n#weights, broken as `broken` says when given.
function M.strategy_source(template, weights, broken)
    local parts = {}
    for i, w in ipairs(weights) do
        assert(type(w) == "number" and w > 0, "weights must be > 0")
        parts[i] = format("n%d = %d", i, w)
    end
    local line = "local WEIGHTS = { " .. table.concat(parts, ", ")
        .. " } -- WEIGHTS"
    local text, n = template:gsub("local WEIGHTS = [^\n]*", line, 1)
    assert(n == 1, "strategy template: no WEIGHTS line")
    if broken == "syntax" then
        text = text:gsub("\nreturn M\n", "\nreturn M end -- broken\n", 1)
    elseif broken == "raise_load" then
        text = text:gsub("\nlocal M = {}\n",
            "\nerror(\"nemesis: a strategy module that raises\")\n"
            .. "local M = {}\n", 1)
    elseif broken == "raise_call" then
        text = text:gsub("\nreturn M\n",
            "\nfunction methods.allocate() error(\"nemesis: allocate\") end\n"
            .. "function methods.rebalance() error(\"nemesis: rebalance\") "
            .. "end\n\nreturn M\n", 1)
    elseif broken ~= nil then
        error("unknown broken kind " .. tostring(broken))
    end
    return text
end

-- Writes `text` to `path` at once (a temporary file renamed over it), so
-- a node's watcher never reads half a file.
function M.write_atomic(path, text)
    local tmp = path .. ".tmp"
    local f = assert(io.open(tmp, "w"))
    f:write(text)
    f:close()
    assert(os.rename(tmp, path))
end

-- The reload lines about the strategy file in a log text: how many said
-- a strategy was replaced, and how many that the old one stays.
function M.reload_lines(log)
    local replaced, refused = 0, 0
    for l in log:gmatch("[^\n]+") do
        if l:find("reload: ", 1, true)
                and l:find(M.STRATEGY_FILE, 1, true) then
            if l:find("the old strategy stays", 1, true) then
                refused = refused + 1
            elseif l:find("replaced", 1, true) then
                replaced = replaced + 1
            end
        end
    end
    return replaced, refused
end

local function lines_of(cmd)
    local f = io.popen(cmd)
    local out = f:read("*a")
    f:close()
    return out
end

-- The local ports of process `pid`'s TCP connections to port `port`,
-- from /proc (its sockets' inodes, then its network namespace's tcp
-- tables): a list of numbers, empty when it has none.
function M.client_ports(pid, port)
    local inodes = {}
    for inode in lines_of(format("ls -l /proc/%d/fd 2>/dev/null", pid))
            :gmatch("socket:%[(%d+)%]") do
        inodes[inode] = true
    end
    local ports = {}
    for _, t in ipairs({ "tcp", "tcp6" }) do
        local f = io.open(format("/proc/%d/net/%s", pid, t), "r")
        if f then
            for l in f:lines() do
                -- sl local_address rem_address st ... uid timeout inode
                local lport, rport, inode = l:match(
                    "^%s*%d+:%s+%x+:(%x+)%s+%x+:(%x+)%s+%x+%s+%S+%s+%S+"
                    .. "%s+%S+%s+%d+%s+%d+%s+(%d+)")
                if lport and tonumber(rport, 16) == port and inodes[inode]
                        then
                    ports[#ports + 1] = tonumber(lport, 16)
                end
            end
            f:close()
        end
    end
    table.sort(ports)
    return ports
end

-- The SQL that ends the backends of database `db`: all of them but the
-- one running it, or only those whose client port is in `ports`.
function M.kill_sql(db, ports)
    assert(db:match("^[%w_]+$"), "bad database name")
    local where = format("datname = '%s' AND pid <> pg_backend_pid()", db)
    if ports then
        if #ports == 0 then return nil end
        for _, p in ipairs(ports) do
            assert(type(p) == "number" and p % 1 == 0, "bad port")
        end
        where = where .. " AND client_port IN ("
            .. table.concat(ports, ", ") .. ")"
    end
    return "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        .. "WHERE " .. where
end

return M

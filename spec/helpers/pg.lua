-- spec/helpers/pg.lua: a throwaway PostgreSQL for busted specs, through
-- spec/helpers/pg_server.sh (initdb into a temporary folder, a server on
-- 127.0.0.1 at a free port, the database moonshard_test, a superuser `ms`
-- with a random password; run as `postgres` when we are root).
--
--   local pg = require "helpers.pg"
--   local srv = pg.start()   -- raises when no server can be started;
--                            -- a guard stops it if this process dies
--   pg.start(pid)            -- the guard watches `pid` instead
--   pg.start(pid, { listen = "10.213.7.1", allow = "10.213.7.0/24" })
--                            -- also listens on that address, and lets
--                            -- clients of that network log in
--   srv.conninfo, srv.port, srv.pid, srv.dir
--   srv:pause() / srv:resume()   -- stop and start again, same port
--   srv:stop()                   -- stop it by PID, remove its folder
--   pg.stop_all()                -- every server of this module still up
--
-- A spec that needs PostgreSQL calls pg.start() and fails when it raises:
-- it never skips.

local io_popen, io_open = io.popen, io.open
local format = string.format
local error, tonumber, setmetatable = error, tonumber, setmetatable
local pcall = pcall
local pairs = pairs

local ffi = require "ffi"

local M = {}

if not pcall(ffi.typeof, "struct ms_spec_pg_getpid") then
    ffi.cdef [[
        struct ms_spec_pg_getpid { int unused; };
        int getpid(void);
    ]]
end

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]+$") or "."
M.script = here .. "/pg_server.sh"

local running = {}

-- the output of `cmd` and whether it exited 0 (stderr passes through);
-- the status comes from the shell (LuaJIT's popen close does not give it)
local function run(cmd)
    local f = io_popen(cmd .. "; echo \"ms-rc=$?\"", "r")
    local out = f:read("*a")
    f:close()
    local rc = out:match("ms%-rc=(%d+)\n$")
    out = out:gsub("ms%-rc=%d+\n$", "")
    return out, rc == "0"
end

local function sh_quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local Server = {}
Server.__index = Server

function Server:stop()
    if not self.dir then return end
    run(format("%s stop %s", sh_quote(M.script), sh_quote(self.dir)))
    running[self] = nil
    self.dir = nil
end

function Server:pause()
    local _, ok = run(format("%s pause %s", sh_quote(M.script),
        sh_quote(self.dir)))
    if not ok then error("pg_server.sh pause failed", 2) end
end

function Server:resume()
    local out, ok = run(format("%s resume %s", sh_quote(M.script),
        sh_quote(self.dir)))
    if not ok then error("pg_server.sh resume failed", 2) end
    self.pid = tonumber(out:match("%d+"))
end

-- Starts a server; raises with the reason when it cannot. Once the
-- process `owner` (default: this one) is gone, a guard process stops the
-- server and removes its folder, should the spec not get to it.
-- opts.listen (an IPv4 address) and opts.allow (an IPv4 network "A.B.C.D/N"),
-- both or neither: the server listens on that address too (beside
-- 127.0.0.1) and accepts logins from that network. opts.ports: ports
-- to try first (before random ones).
function M.start(owner, opts)
    owner = owner or ffi.C.getpid()
    local extra = ""
    if opts and (opts.listen or opts.allow) then
        local ip = "^%d+%.%d+%.%d+%.%d+"
        if not (type(opts.listen) == "string"
                and opts.listen:match(ip .. "$")
                and type(opts.allow) == "string"
                and opts.allow:match(ip .. "/%d+$")) then
            error("pg.start: opts.listen must be an IPv4 address and "
                  .. "opts.allow an IPv4 network A.B.C.D/N", 2)
        end
        extra = format(" %s %s", sh_quote(tostring(opts.listen)),
                       sh_quote(tostring(opts.allow)))
    end
    local env = ""
    if opts and opts.ports then
        for _, p in ipairs(opts.ports) do
            assert(type(p) == "number", "pg.start: opts.ports holds port numbers")
        end
        env = "MS_PG_PORTS=" .. sh_quote(table.concat(opts.ports, " ")) .. " "
    end
    local out, ok = run(format("%s%s start %d%s", env, sh_quote(M.script),
                               owner, extra))
    local dir, port, pid, conninfo =
        out:match("^([^\n]+)\n(%d+)\n(%d+)\n([^\n]+)\n$")
    if not (ok and dir) then
        error("cannot start a throwaway PostgreSQL (" .. M.script
            .. "): " .. out, 2)
    end
    local srv = setmetatable({ dir = dir, port = tonumber(port),
        pid = tonumber(pid), conninfo = conninfo }, Server)
    running[srv] = true
    return srv
end

function M.stop_all()
    for srv in pairs(running) do srv:stop() end
end

-- true when a process with this PID exists and is no zombie
function M.alive(pid)
    local f = io_open(format("/proc/%d/stat", pid), "r")
    if not f then return false end
    local stat = f:read("*a") or ""
    f:close()
    return stat:match("^%d+ %b() (%a)") ~= "Z"
end

-- the PIDs whose parent is `pid` (a postmaster's backends and workers)
function M.children(pid)
    local out = run(format("ps -o pid= --ppid %d", pid))
    local list = {}
    for p in out:gmatch("%d+") do list[#list + 1] = tonumber(p) end
    return list
end

-- the rows of `sql` through psql, one string per row ("|" between
-- columns), or nil and the error text
function M.psql(srv, sql)
    local out, ok = run(format("psql %s -XtA -c %s 2>&1",
        sh_quote(srv.conninfo), sh_quote(sql)))
    if not ok then return nil, out end
    local rows = {}
    for line in out:gmatch("[^\n]+") do rows[#rows + 1] = line end
    return rows
end

-- the rows of `sql` in database `db` of `srv` (M.psql); raises on error
function M.query(srv, db, sql)
    local rows, err = M.psql({ conninfo = srv.conninfo:gsub(
        "dbname=%S+", "dbname=" .. db) }, sql)
    assert(rows, err)
    return rows
end

-- Creates database `name` on `srv` and returns its connection string.
function M.database(srv, name)
    M.query(srv, "moonshard_test", "CREATE DATABASE " .. name)
    return (srv.conninfo:gsub("dbname=%S+", "dbname=" .. name))
end

-- The schema version this build creates (MS_PG_SCHEMA_VERSION in
-- runtime/io/pg_schema.h).
M.SCHEMA_VERSION = 2

-- Waits until node `n` reports its schema migrated (M.SCHEMA_VERSION).
function M.wait_migrated(n, timeout)
    local helpers = require "helpers.node"
    return helpers.wait_until(function()
        local d = n:stats().database
        return d.schema_version == M.SCHEMA_VERSION,
            "schema " .. tostring(d.schema_version)
    end, timeout or 30, "the schema migrated")
end

return M

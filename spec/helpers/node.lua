-- spec/helpers/node.lua: real moonshard node processes for the runtime and
-- integration specs (spec/02-runtime, spec/03-integration).
--
--     local helpers = require "helpers.node"
--     local n
--     setup(function()
--         n = helpers.start({ entities = { Counter = { module = "counter" } } })
--     end)
--     teardown(function() helpers.stop_all() end)
--     it("...", function()
--         local status, body = n:ask("Counter", "c1", { type = "get" })
--     end)
--
-- Processes are started with posix_spawnp through the LuaJIT FFI (no
-- luasocket or luaposix needed), so each one is a direct child of the spec
-- process: it is stopped by PID (SIGTERM, then SIGKILL after a deadline),
-- reaped with waitpid, and its exit status is known. `stop_all()` stops
-- every node a spec file started; `leaks()` lists the processes it
-- started that still exist (the leak check, {} after stop_all()). As a last resort a finalizer kills leftovers when
-- the helper module is collected or the VM closes.
--
-- A node's config is generated into a fresh temp dir (the config's folder
-- is on the node's module path, so `files` written there can be behavior
-- modules, say a broken one) and starts with
--     package.path = "<repo>/spec/fixtures/?.lua;" .. package.path
-- so the fixture behaviors in spec/fixtures/ load by name. Ports come from
-- binding 127.0.0.1:0; a node that loses the race for its port is started
-- again on new ports.
--
-- HTTP requests use a small blocking client over FFI sockets (one
-- connection per request); the moonshard CLI is run with
-- `helpers.moonshard(...)`. Load generators may spawn curl.
--
-- Environment: MOONSHARD_BIN (default build/moonshard), MOONSHARD_HOME
-- (default the current directory, the repository root), MOONSHARD_KEEP_TMP
-- (set: keep temp dirs for a post-mortem).

local ffi = require "ffi"
local cjson = require("cjson.safe").new()

local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring,
    tonumber
local error, assert, pcall, setmetatable = error, assert, pcall, setmetatable
local format, byte, gsub, match, find = string.format, string.byte,
    string.gsub, string.match, string.find
local concat, sort = table.concat, table.sort
local floor = math.floor
local io_open = io.open

local M = {}

-------------------------------------------------------------------------------
-- libc through the FFI (declared once per VM: busted re-requires helpers in
-- every spec file, and ffi.cdef refuses to redeclare)

if not pcall(ffi.typeof, "struct ms_spec_timespec") then
    ffi.cdef [[
        struct ms_spec_timespec { long tv_sec; long tv_nsec; };
        struct ms_spec_sockaddr_in {
            uint16_t family; uint8_t port[2]; uint8_t addr[4]; uint8_t zero[8];
        };
        struct ms_spec_timeval { long tv_sec; long tv_usec; };
        int socket(int domain, int type, int protocol);
        int bind(int fd, const void *addr, uint32_t len);
        int connect(int fd, const void *addr, uint32_t len);
        int setsockopt(int fd, int level, int name, const void *val,
                       uint32_t len);
        long send(int fd, const void *buf, size_t len, int flags);
        long recv(int fd, void *buf, size_t len, int flags);
        int getsockname(int fd, void *addr, uint32_t *len);
        int close(int fd);
        int posix_spawn_file_actions_init(void *fa);
        int posix_spawn_file_actions_destroy(void *fa);
        int posix_spawn_file_actions_addopen(void *fa, int fd,
            const char *path, int oflag, unsigned int mode);
        int posix_spawn_file_actions_adddup2(void *fa, int fd, int newfd);
        int posix_spawnp(int *pid, const char *file, const void *fa,
            const void *attr, char *const argv[], char *const envp[]);
        extern char **environ;
        int waitpid(int pid, int *status, int options);
        int kill(int pid, int sig);
        int clock_gettime(int clk, struct ms_spec_timespec *ts);
        int poll(void *fds, unsigned long nfds, int timeout);
        char *getcwd(char *buf, size_t size);
        char *mkdtemp(char *template);
        char *strerror(int errnum);
    ]]
end

local C = ffi.C

local AF_INET, SOCK_STREAM = 2, 1
local SOL_SOCKET, SO_RCVTIMEO, SO_SNDTIMEO = 1, 20, 21
local MSG_NOSIGNAL = 0x4000
local EINTR = 4
local O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC = 0, 1, 64, 512
local WNOHANG = 1
local SIGKILL, SIGTERM = 9, 15
local CLOCK_MONOTONIC = 1
local ESRCH = 3
local ECONNRESET = 104
local SIGSTOP, SIGCONT = 19, 18
M.SIGKILL, M.SIGTERM, M.SIGSTOP, M.SIGCONT = SIGKILL, SIGTERM, SIGSTOP,
    SIGCONT

local function errtext()
    return ffi.string(C.strerror(ffi.errno()))
end

-------------------------------------------------------------------------------
-- Time

-- Monotonic seconds.
function M.now()
    local ts = ffi.new("struct ms_spec_timespec")
    C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

function M.sleep(seconds)
    C.poll(nil, 0, floor(seconds * 1000 + 0.5))
end

-- Calls fn() every `interval` seconds until it returns a truthy value,
-- which is returned. Raises "timed out after Ns waiting for WHAT" (with the
-- last value fn returned) when `timeout` seconds pass first.
function M.wait_until(fn, timeout, what, interval)
    timeout = timeout or 5
    interval = interval or 0.02
    local deadline = M.now() + timeout
    local last
    while true do
        local v, extra = fn()
        if v then
            return v, extra
        end
        last = extra
        if M.now() >= deadline then
            error(format("timed out after %gs waiting for %s%s", timeout,
                         what or "a condition",
                         last ~= nil and (" (last: " .. tostring(last) .. ")")
                             or ""), 2)
        end
        M.sleep(interval)
    end
end

-------------------------------------------------------------------------------
-- Paths and files

local function cwd()
    local buf = ffi.new("char[4096]")
    assert(C.getcwd(buf, 4096) ~= nil, "getcwd failed")
    return ffi.string(buf)
end

local function absolute(p)
    if p:sub(1, 1) == "/" then
        return p
    end
    return cwd() .. "/" .. p
end

M.home = absolute(os.getenv("MOONSHARD_HOME") or cwd())
M.bin = absolute(os.getenv("MOONSHARD_BIN") or (M.home .. "/build/moonshard"))
M.fixtures = M.home .. "/spec/fixtures"

function M.read_file(path)
    local f = io_open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("*a")
    f:close()
    return s
end

function M.write_file(path, text)
    local f = assert(io_open(path, "wb"))
    f:write(text)
    f:close()
end

local tmpdirs = {}
local scratch_dir -- see M.scratch

-- A fresh, empty directory, removed by cleanup() (unless
-- MOONSHARD_KEEP_TMP is set).
function M.tmpdir()
    local template = ffi.new("char[?]", 64)
    ffi.copy(template, "/tmp/moonshard-spec-XXXXXX")
    local p = C.mkdtemp(template)
    assert(p ~= nil, "mkdtemp: " .. errtext())
    local dir = ffi.string(p)
    tmpdirs[#tmpdirs + 1] = dir
    return dir
end

function M.cleanup()
    if os.getenv("MOONSHARD_KEEP_TMP") then
        return
    end
    for _, dir in ipairs(tmpdirs) do
        -- only our own mkdtemp results
        if match(dir, "^/tmp/moonshard%-spec%-[%w]+$") then
            os.execute("rm -rf '" .. dir .. "'")
        end
    end
    tmpdirs = {}
    scratch_dir = nil
end

-------------------------------------------------------------------------------
-- Processes

local children = {} -- [pid] = proc, until reaped
local started = {}  -- every pid spawned by this spec file

local Proc = {}
Proc.__index = Proc

-- Starts argv[1] (searched in PATH) with argv. opts: stdout, stderr (file
-- paths; default /dev/null; stderr = "stdout" shares stdout's file).
-- Returns a proc; never blocks.
function M.spawn(argv, opts)
    opts = opts or {}
    local n = #argv
    local cargv = ffi.new("char *[?]", n + 1)
    local keep = {}
    for i = 1, n do
        local s = tostring(argv[i])
        local buf = ffi.new("char[?]", #s + 1)
        ffi.copy(buf, s, #s)
        keep[i] = buf
        cargv[i - 1] = buf
    end
    cargv[n] = nil
    local fa = ffi.new("uint8_t[256]") -- posix_spawn_file_actions_t is 80
    assert(C.posix_spawn_file_actions_init(fa) == 0)
    local out = opts.stdout or "/dev/null"
    local err = opts.stderr or "/dev/null"
    C.posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0)
    C.posix_spawn_file_actions_addopen(fa, 1, out,
                                       O_WRONLY + O_CREAT + O_TRUNC, 420)
    if err == "stdout" then
        C.posix_spawn_file_actions_adddup2(fa, 1, 2)
    else
        C.posix_spawn_file_actions_addopen(fa, 2, err,
                                           O_WRONLY + O_CREAT + O_TRUNC, 420)
    end
    local pid = ffi.new("int[1]")
    local rc = C.posix_spawnp(pid, cargv[0], fa, nil, cargv, C.environ)
    C.posix_spawn_file_actions_destroy(fa)
    if rc ~= 0 then
        error(format("cannot start %s: %s", tostring(argv[1]),
                     ffi.string(C.strerror(rc))), 2)
    end
    local proc = setmetatable({ pid = pid[0], argv = argv, keep = keep },
                              Proc)
    children[proc.pid] = proc
    started[#started + 1] = proc.pid
    return proc
end

local function decode_status(st)
    local sig = st % 128
    if sig == 0 then
        return floor(st / 256) % 256, nil
    end
    return nil, sig
end

-- Reaps the process if it has exited. Returns true once it is reaped; then
-- proc.code (exit code) or proc.signal (terminating signal) is set.
function Proc:poll()
    if self.reaped then
        return true
    end
    local st = ffi.new("int[1]")
    local rc = C.waitpid(self.pid, st, WNOHANG)
    if rc == self.pid then
        self.code, self.signal = decode_status(st[0])
        self.reaped = true
        children[self.pid] = nil
        return true
    end
    if rc < 0 then -- not our child any more: nothing left to wait for
        self.reaped = true
        children[self.pid] = nil
        return true
    end
    return false
end

-- Waits up to `timeout` seconds for the process to exit. Returns true once
-- reaped, false on timeout (the process keeps running).
function Proc:wait(timeout)
    local deadline = M.now() + (timeout or 10)
    local pause = 0.001
    while not self:poll() do
        if M.now() >= deadline then
            return false
        end
        M.sleep(pause)
        pause = pause < 0.02 and pause * 2 or pause
    end
    return true
end

function Proc:send_signal(sig)
    if not self.reaped then
        C.kill(self.pid, sig)
    end
end

-- SIGTERM, then SIGKILL after `grace` seconds. Returns true when the
-- process exited within the grace period (it was not killed).
function Proc:terminate(grace)
    if self:poll() then
        return true
    end
    self:send_signal(SIGTERM)
    if self:wait(grace or 5) then
        return true
    end
    self:send_signal(SIGKILL)
    self:wait(5)
    self.killed = true
    return false
end

-- True while a process with this PID exists (and is not a zombie).
function M.pid_alive(pid)
    if C.kill(pid, 0) ~= 0 then
        return ffi.errno() ~= ESRCH
    end
    local stat = M.read_file("/proc/" .. pid .. "/stat")
    if stat and match(stat, "^%d+ %b() Z") then
        return false
    end
    return true
end

-- PIDs started by this helper (in this spec file) and not reaped yet.
function M.running()
    local list = {}
    for pid in pairs(children) do
        list[#list + 1] = pid
    end
    sort(list)
    return list
end

-- The leak check: PIDs this spec file started that still exist, reaped or
-- not. Call it after stop_all(); it should be {}.
function M.leaks()
    local list = {}
    for _, pid in ipairs(started) do
        if children[pid] or M.pid_alive(pid) then
            list[#list + 1] = pid
        end
    end
    return list
end

-- For a spec file's teardown: stops every process it started (stop_all)
-- and raises, naming them, when one of them outlived that.
function M.stop_all_checked(grace)
    M.stop_all(grace)
    local left = M.leaks()
    if #left > 0 then
        error("processes left running: " .. concat(left, ", "), 2)
    end
end

-- Runs argv to completion (killed after `timeout` seconds). Returns
-- code (nil when killed by a signal), stdout, stderr, signal.
function M.run(argv, timeout)
    local dir = M.scratch()
    local out, err = dir .. "/run.out", dir .. "/run.err"
    local p = M.spawn(argv, { stdout = out, stderr = err })
    if not p:wait(timeout or 20) then
        p:terminate(1)
        error(format("%s did not finish within %gs", concat(argv, " "),
                     timeout or 20), 2)
    end
    return p.code, M.read_file(out) or "", M.read_file(err) or "", p.signal
end

-- Runs the moonshard binary: M.moonshard("shard", "--count", "8", "a").
function M.moonshard(...)
    local argv = { M.bin, ... }
    return M.run(argv)
end

-- A temp dir for request and response files of this spec file.
function M.scratch()
    if not scratch_dir then
        scratch_dir = M.tmpdir()
    end
    return scratch_dir
end

-------------------------------------------------------------------------------
-- Ports

local issued = {}

-- A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read
-- the port back, close). Never the same port twice in one spec file.
function M.free_port()
    for _ = 1, 50 do
        local fd = C.socket(AF_INET, SOCK_STREAM, 0)
        assert(fd >= 0, "socket: " .. errtext())
        local sa = ffi.new("struct ms_spec_sockaddr_in")
        sa.family = AF_INET
        sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
        local len = ffi.new("uint32_t[1]", ffi.sizeof(sa))
        local ok = C.bind(fd, sa, ffi.sizeof(sa)) == 0
            and C.getsockname(fd, sa, len) == 0
        local why = not ok and errtext()
        C.close(fd)
        assert(ok, why)
        local port = sa.port[0] * 256 + sa.port[1]
        if not issued[port] then
            issued[port] = true
            return port
        end
    end
    error("no free port found")
end

-------------------------------------------------------------------------------
-- JSON and Lua literals

M.json = cjson

local function is_ident(k)
    return type(k) == "string" and match(k, "^[%a_][%w_]*$") ~= nil
end

-- A Lua literal for plain data (sorted keys, so configs are stable).
local function literal(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "string" then
        return format("%q", v)
    elseif t == "number" then
        if v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
            return format("%d", v)
        end
        return format("%.17g", v)
    elseif t == "boolean" or t == "nil" then
        return tostring(v)
    elseif t ~= "table" then
        error("cannot write a " .. t .. " into a config", 2)
    elseif type(v.__lua) == "string" then
        return v.__lua -- a Lua expression, written as is
    end
    local keys, n = {}, #v
    for k in pairs(v) do
        if not (type(k) == "number" and k >= 1 and k <= n and k == floor(k)) then
            keys[#keys + 1] = k
        end
    end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local inner = indent .. "    "
    local parts = {}
    for i = 1, n do
        parts[#parts + 1] = inner .. literal(v[i], inner)
    end
    for _, k in ipairs(keys) do
        local key = is_ident(k) and k or ("[" .. literal(k) .. "]")
        parts[#parts + 1] = inner .. key .. " = " .. literal(v[k], inner)
    end
    if #parts == 0 then
        return "{}"
    end
    return "{\n" .. concat(parts, ",\n") .. ",\n" .. indent .. "}"
end
M.literal = literal

-------------------------------------------------------------------------------
-- Nodes

local Node = {}
Node.__index = Node

local nodes = {} -- started by this spec file, in order

-- The source of a generated config script.
local function config_source(opts, listen_port, http_port)
    local lines = {
        "-- generated by spec/helpers/node.lua",
        format("package.path = %q .. package.path",
               M.fixtures .. "/?.lua;"),
        "return {",
        format("    cluster = %q,", opts.cluster or "spec"),
        format("    nodes = { { name = %q, listen = \"127.0.0.1:%d\","
               .. " http = \"127.0.0.1:%d\" } },", opts.name or "n1",
               listen_port, http_port),
        "    entities = " .. literal(opts.entities, "    ") .. ",",
    }
    if opts.limits then
        lines[#lines + 1] = "    limits = " .. literal(opts.limits, "    ")
            .. ","
    end
    -- opts.settings: more top-level fields, e.g. stuck_handler_ms
    local keys = {}
    for k in pairs(opts.settings or {}) do keys[#keys + 1] = k end
    sort(keys)
    for _, k in ipairs(keys) do
        lines[#lines + 1] = format("    %s = %s,", k,
                                   literal(opts.settings[k], "    "))
    end
    lines[#lines + 1] = "}"
    return concat(lines, "\n") .. "\n"
end

-- Writes a config for `opts` into a fresh temp dir; returns its path, dir.
-- opts.entities (required), opts.limits, opts.settings (other top-level
-- fields), opts.name, opts.cluster, opts.files = { ["name.lua"] = text }
-- written beside the config.
function M.write_config(opts, listen_port, http_port)
    local dir = M.tmpdir()
    for name, text in pairs(opts.files or {}) do
        M.write_file(dir .. "/" .. name, text)
    end
    local path = dir .. "/cluster.lua"
    M.write_file(path, config_source(opts, listen_port or M.free_port(),
                                     http_port or M.free_port()))
    return path, dir
end

local function launch(opts)
    local listen_port, http_port = M.free_port(), M.free_port()
    local path, dir = M.write_config(opts, listen_port, http_port)
    local n = setmetatable({
        dir = dir,
        config = path,
        log_path = dir .. "/node.log",
        -- opts.stderr_apart: the log lines (stderr) in a file of their own
        stderr_path = opts.stderr_apart and dir .. "/stderr.log" or nil,
        port = http_port,
        address = "127.0.0.1:" .. http_port,
        base = "http://127.0.0.1:" .. http_port,
    }, Node)
    n.proc = M.spawn({ M.bin, "node", path },
                     { stdout = n.log_path,
                       stderr = n.stderr_path or "stdout" })
    n.pid = n.proc.pid
    return n
end

-- Starts a node and waits until GET /v1/health answers 200. Raises, with
-- the node's log, when it does not come up within opts.timeout (10 s).
function M.start(opts)
    assert(type(opts) == "table" and type(opts.entities) == "table",
           "start: opts.entities is required")
    local why
    for _ = 1, 3 do
        local n = launch(opts)
        nodes[#nodes + 1] = n
        local deadline = M.now() + (opts.timeout or 10)
        while true do
            if n.proc:poll() then
                why = format("node exited (code %s, signal %s):\n%s",
                             tostring(n.proc.code), tostring(n.proc.signal),
                             n:log())
                break
            end
            local status = n:http("GET", "/v1/health", nil,
                                  { max_time = 1 })
            if status == 200 then
                return n
            end
            if M.now() >= deadline then
                n:stop(1)
                error("node did not come up:\n" .. n:log(), 2)
            end
            M.sleep(0.01)
        end
        if not find(why, "cannot listen", 1, true) then
            break -- not a lost race for the port: do not retry
        end
    end
    error(why, 2)
end

-- The node's stdout and stderr so far.
function Node:log()
    return (M.read_file(self.log_path) or "")
        .. (self.stderr_path and M.read_file(self.stderr_path) or "")
end

-- The node's stderr alone (opts.stderr_apart), else nil.
function Node:stderr()
    return self.stderr_path and (M.read_file(self.stderr_path) or "")
end

function Node:alive()
    return not self.proc:poll()
end

-- Stops the node by PID: SIGTERM, SIGKILL after `grace` seconds (5).
-- Returns the exit code (nil when it died by a signal) and the signal.
function Node:stop(grace)
    self.proc:terminate(grace)
    return self.proc.code, self.proc.signal
end

-- Stops every node this spec file started, and every other process it
-- started that still runs, by PID: SIGTERM to all of them at once, then
-- SIGKILL to those still running after `grace` seconds (5). Removes the
-- temp dirs.
function M.stop_all(grace)
    local procs, seen = {}, {}
    for _, n in ipairs(nodes) do
        if not seen[n.proc] then
            seen[n.proc] = true
            procs[#procs + 1] = n.proc
        end
    end
    for _, pid in ipairs(M.running()) do
        if not seen[children[pid]] then
            seen[children[pid]] = true
            procs[#procs + 1] = children[pid]
        end
    end
    for _, p in ipairs(procs) do
        if p:poll() then
            p.done = true
        else
            p:send_signal(SIGCONT) -- a stopped process cannot handle TERM
            p:send_signal(SIGTERM)
        end
    end
    local deadline = M.now() + (grace or 5)
    for _, p in ipairs(procs) do
        if not p.done and not p:wait(math.max(deadline - M.now(), 0)) then
            p:send_signal(SIGKILL)
            p:wait(5)
            p.killed = true
        end
    end
    nodes = {}
    M.cleanup()
end

local function pct_encode(s)
    return (gsub(s, "[^%w%-%._~]", function(c)
        return format("%%%02X", byte(c))
    end))
end
M.pct_encode = pct_encode

-- A blocking exchange of raw bytes with 127.0.0.1:port over a fresh TCP
-- connection: sends `bytes`, then reads until the peer closes or
-- `max_time` seconds pass without data. Returns every byte received,
-- an error text (nil when all went well) and `closed`: true when the
-- peer closed the connection (EOF or reset), false when the read timed
-- out with the connection still open.
-- A TCP socket connected to 127.0.0.1:port with send and receive
-- timeouts of max_time seconds (none when nil), or nil and why.
local function dial(port, max_time)
    local fd = C.socket(AF_INET, SOCK_STREAM, 0)
    if fd < 0 then
        return nil, "socket: " .. errtext()
    end
    if max_time then
        local tv = ffi.new("struct ms_spec_timeval")
        tv.tv_sec = floor(max_time)
        tv.tv_usec = floor((max_time - floor(max_time)) * 1e6)
        C.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, tv, ffi.sizeof(tv))
        C.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, tv, ffi.sizeof(tv))
    end
    local sa = ffi.new("struct ms_spec_sockaddr_in")
    sa.family = AF_INET
    sa.port[0], sa.port[1] = floor(port / 256), port % 256
    sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
    if C.connect(fd, sa, ffi.sizeof(sa)) ~= 0 then
        local why = "connect: " .. errtext()
        C.close(fd)
        return nil, why
    end
    return fd
end

function M.tcp_exchange(port, bytes, max_time)
    max_time = max_time or 30
    local fd, err = dial(port, max_time)
    if not fd then
        return "", err, false
    end
    local sent, len = 0, #bytes
    local why
    while sent < len do
        local k = C.send(fd, ffi.cast("const char *", bytes) + sent,
                         len - sent, MSG_NOSIGNAL)
        if k < 0 and ffi.errno() ~= EINTR then
            -- a peer that refuses a request (413) may close before it
            -- read all of it: its answer can still be there, so read on
            why = "send: " .. errtext()
            break
        end
        sent = sent + math.max(tonumber(k), 0)
    end
    local chunks, buf = {}, ffi.new("char[65536]")
    local closed
    while true do
        local k = C.recv(fd, buf, 65536, 0)
        if k > 0 then
            chunks[#chunks + 1] = ffi.string(buf, k)
        elseif k == 0 then
            closed = true
            break
        else
            local e = ffi.errno()
            if e ~= EINTR then
                closed = e == ECONNRESET
                why = "recv: " .. errtext()
                break
            end
        end
    end
    C.close(fd)
    return concat(chunks), why, closed
end

-- An open TCP connection to 127.0.0.1:port that a spec drives step by
-- step: c:send(bytes), c:read(max_time, want) -> bytes, closed (reads
-- what arrives within max_time seconds, until the peer closes or, with
-- `want`, until the bytes read contain that plain text), c:close().
-- Returns nil and why when it cannot connect.
local Conn = {}
Conn.__index = Conn

function M.tcp_open(port)
    local fd, err = dial(port)
    if not fd then
        return nil, err
    end
    return setmetatable({ fd = fd, buf = ffi.new("char[65536]") }, Conn)
end

function Conn:send(bytes)
    local sent = 0
    while sent < #bytes do
        local k = C.send(self.fd, ffi.cast("const char *", bytes) + sent,
                         #bytes - sent, MSG_NOSIGNAL)
        if k < 0 then
            if ffi.errno() ~= EINTR then
                return nil, "send: " .. errtext()
            end
        else
            sent = sent + tonumber(k)
        end
    end
    return true
end

function Conn:read(max_time, want)
    local chunks, deadline = {}, M.now() + max_time
    while true do
        if want and find(concat(chunks), want, 1, true) then
            return concat(chunks), false
        end
        local left = deadline - M.now()
        if left <= 0 then
            return concat(chunks), false
        end
        local tv = ffi.new("struct ms_spec_timeval")
        tv.tv_sec = floor(left)
        tv.tv_usec = math.max(floor((left - floor(left)) * 1e6), 1000)
        C.setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, tv, ffi.sizeof(tv))
        local k = C.recv(self.fd, self.buf, 65536, 0)
        if k > 0 then
            chunks[#chunks + 1] = ffi.string(self.buf, k)
        elseif k == 0 then
            return concat(chunks), true
        else
            local e = ffi.errno()
            if e == ECONNRESET then
                return concat(chunks), true
            elseif e ~= EINTR and e ~= 11 then -- EAGAIN: the timeout
                return concat(chunks), false
            end
        end
    end
end

function Conn:close()
    if self.fd then
        C.close(self.fd)
        self.fd = nil
    end
end

-- A blocking HTTP/1.1 exchange with 127.0.0.1:port over a fresh connection
-- (the request should say `Connection: close`: this reads until EOF).
-- Returns the status of the first response (0 when there was no valid
-- response), its raw body, an error text and all the bytes received.
local function exchange(port, request, max_time)
    local response, why = M.tcp_exchange(port, request, max_time)
    local status = tonumber(match(response, "^HTTP/1%.%d (%d%d%d) "))
    local head_end = find(response, "\r\n\r\n", 1, true)
    if not status or not head_end then
        return 0, "", why or "no valid response", response
    end
    return status, response:sub(head_end + 4), why, response
end

-- The bytes of one HTTP/1.1 request. `body`: nil, a string or a table
-- (JSON-encoded). `close`: ask the server to close after answering.
-- `headers`: extra header lines, { ["X-Name"] = "value" }.
function M.format_request(port, method, path, body, close, headers)
    if type(body) == "table" then
        body = assert(cjson.encode(body))
    end
    local head = {
        format("%s %s HTTP/1.1", method, path),
        "Host: 127.0.0.1:" .. port,
    }
    if close then
        head[#head + 1] = "Connection: close"
    end
    if headers then
        local names = {}
        for name in pairs(headers) do
            names[#names + 1] = name
        end
        sort(names)
        for _, name in ipairs(names) do
            head[#head + 1] = name .. ": " .. headers[name]
        end
    end
    if body ~= nil then
        head[#head + 1] = "Content-Type: application/json"
        head[#head + 1] = "Content-Length: " .. #body
    end
    return concat(head, "\r\n") .. "\r\n\r\n" .. (body or "")
end

-- One HTTP request to 127.0.0.1:port. `body`: nil (none), a string (sent
-- as is) or a table (JSON-encoded). Returns status (0 when there was no
-- response), the decoded JSON body (nil if not JSON), the raw body and an
-- error text. opts.max_time: seconds to wait for the answer (30);
-- opts.headers: extra headers (see format_request).
function M.request(port, method, path, body, opts)
    opts = opts or {}
    local req = M.format_request(port, method, path, body, true,
                                 opts.headers)
    local status, raw, why = exchange(port, req, opts.max_time or 30)
    return status, cjson.decode(raw), raw, why
end

-- Sends `requests` (from format_request; only the last one should close)
-- in one write on one connection, and reads every response. Returns a
-- list of { status =, body = decoded, raw = }, in the order they came.
function M.pipeline(port, requests, max_time)
    local _, _, why, response = exchange(port, concat(requests),
                                         max_time or 30)
    local list, pos = {}, 1
    while pos <= #response do
        local status = tonumber(match(response, "^HTTP/1%.%d (%d%d%d) ", pos))
        local head_end = find(response, "\r\n\r\n", pos, true)
        if not status or not head_end then
            break
        end
        local head = response:sub(pos, head_end)
        local len = tonumber(match(head:lower(), "\r\ncontent%-length: (%d+)"))
        if not len then
            break
        end
        local raw = response:sub(head_end + 4, head_end + 3 + len)
        list[#list + 1] = { status = status, body = cjson.decode(raw),
                            raw = raw }
        pos = head_end + 4 + len
    end
    return list, why
end

-- M.request to this node.
function Node:http(method, path, body, opts)
    return M.request(self.port, method, path, body, opts)
end

local function entity_path(t, id, action)
    return format("/v1/entities/%s/%s/%s", pct_encode(t), pct_encode(id),
                  action)
end
M.entity_path = entity_path

function Node:tell(t, id, msg)
    return self:http("POST", entity_path(t, id, "tell"), msg)
end

-- timeout: seconds, a number or a raw query value; nil for the default.
function Node:ask(t, id, msg, timeout)
    local q = timeout ~= nil and ("?timeout=" .. tostring(timeout)) or ""
    return self:http("POST", entity_path(t, id, "ask") .. q, msg)
end

-- Asks and returns the reply, raising unless the status is 200.
function Node:call(t, id, msg, timeout)
    local status, body, raw = self:ask(t, id, msg, timeout)
    if status ~= 200 then
        error(format("ask %s/%s %s: %s %s", t, id, cjson.encode(msg),
                     tostring(status), raw), 2)
    end
    return body
end

function Node:stop_entity(t, id)
    return self:http("POST", entity_path(t, id, "stop"))
end

-- GET /v1/stats, decoded.
function Node:stats()
    local status, body, raw = self:http("GET", "/v1/stats")
    if status ~= 200 then
        error("GET /v1/stats: " .. tostring(status) .. " " .. raw, 2)
    end
    return body
end

-- Waits until the node has handled everything accepted (pending == 0 and
-- delivered >= `delivered` when given). Returns the stats.
function Node:settle(delivered, timeout)
    return M.wait_until(function()
        local s = self:stats()
        if s.pending == 0 and (not delivered or s.delivered >= delivered) then
            return s
        end
        return nil, "pending " .. s.pending .. ", delivered " .. s.delivered
    end, timeout or 10, "the node to settle")
end

-- GET `path` on this node, decoded; raises unless the status is 200.
function Node:get_json(path)
    local status, body, raw = self:http("GET", path, nil, { max_time = 5 })
    if status ~= 200 or type(body) ~= "table" then
        error(format("%s GET %s: %s %s", self.name or self.address, path,
                     tostring(status), raw), 2)
    end
    return body
end

-- GET /v1/members: { self, leader (uids), converged, members = {{uid, name,
-- address, status, up_number, reachable, ...}} }.
function Node:members()
    return self:get_json("/v1/members")
end

-- GET /v1/allocations/{type}: { type, generation, shard_count, shards =
-- {{shard, owner (name) or JSON null, uid, generation}} }.
function Node:allocations(t)
    return self:get_json("/v1/allocations/" .. pct_encode(t))
end

-- GET /v1/entities/{type}/{id}/owner: { type, id, shard, owner, uid }.
function Node:owner(t, id)
    return self:get_json(entity_path(t, id, "owner"))
end

-- POST /v1/entities/{type}/{id}/activate; returns status, body, raw.
function Node:activate(t, id)
    return self:http("POST", entity_path(t, id, "activate"))
end

-- POST /v1/leave or /v1/down (`action`) with a member's address as the
-- JSON body, or a table encoded as the body ({ address = ..., force =
-- true }). `token`: the X-Moonshard-Token header; nil: the cluster's
-- admin token; false: no header. Returns status, body, raw.
function Node:admin(action, address, token)
    if token == nil then
        token = self.cluster and self.cluster.admin_token
    end
    local headers = token and { ["X-Moonshard-Token"] = token } or nil
    return self:http("POST", "/v1/" .. action, cjson.encode(address),
                     { headers = headers })
end

-- Sends signal `sig` (helpers.SIGSTOP, ...) to the node's process.
function Node:signal(sig)
    self.proc:send_signal(sig)
end

-- SIGKILL, and waits until the process is reaped.
function Node:kill()
    self.proc:send_signal(SIGKILL)
    assert(self.proc:wait(5), "SIGKILL did not end the node")
end

-- The member of a /v1/members answer named `name` (the live one when a
-- restarted node is listed twice), or nil.
function M.member(view, name)
    local found
    for _, m in ipairs(view.members) do
        if m.name == name and (not found or found.status ~= "up") then
            found = m
        end
    end
    return found
end

-- The name of the leader of a /v1/members answer, or nil.
function M.leader_name(view)
    for _, m in ipairs(view.members) do
        if m.uid == view.leader then
            return m.name
        end
    end
    return nil
end

-------------------------------------------------------------------------------
-- Clusters: several nodes of one config, each its own process
--
--     local c = helpers.cluster({ size = 4, entities = { ... } })
--     c:start({ "n1", "n2", "n3" })        -- n4 stays in the config only
--     c:wait_converged({ "n1", "n2", "n3" })
--     c:node("n2"):ask("Counter", "c1", { type = "get" })
--
-- Nodes are named n1..nK, each with its own listen (the member address,
-- node.listen) and HTTP port (node.port); the first node is the default
-- seed. The config sets `secret` and `admin_token` (helpers.SECRET and
-- helpers.ADMIN_TOKEN unless opts say otherwise). Each node runs as
-- `moonshard node CONFIG --name nK`; a node started again gets a new
-- process (a new incarnation) and a new log file. stop_all() stops them
-- all by PID.

M.SECRET = "spec-cluster-secret"
M.ADMIN_TOKEN = "spec-admin-token"

local Cluster = {}
Cluster.__index = Cluster

-- A node of cluster `c` named `name` on fresh ports (not started).
local function cluster_node(c, name)
    local lp, hp = M.free_port(), M.free_port()
    return setmetatable({
        cluster = c,
        name = name,
        dir = c.dir,
        config = c.config,
        listen_port = lp,
        listen = "127.0.0.1:" .. lp,
        port = hp,
        address = "127.0.0.1:" .. hp,
        base = "http://127.0.0.1:" .. hp,
        runs = 0,
    }, Node)
end

-- Writes a config of cluster `c` into its dir as `file`, with `changes`
-- applied to its top-level fields (say { secret = "other" }) and the
-- nodes `extra` (from c:new_node) appended to its node list. Returns the
-- path.
function Cluster:write_config(file, changes, extra)
    local opts = self.opts
    local t = {
        cluster = opts.cluster or "spec",
        secret = self.secret,
        admin_token = self.admin_token,
        seeds = opts.seeds,
        entities = opts.entities,
        limits = opts.limits,
        nodes = {},
    }
    for k, v in pairs(opts.settings or {}) do
        t[k] = v
    end
    for k, v in pairs(changes or {}) do
        t[k] = v
    end
    local list = {}
    for _, n in ipairs(self.nodes) do
        list[#list + 1] = n
    end
    for _, n in ipairs(extra or {}) do
        list[#list + 1] = n
    end
    for i, n in ipairs(list) do
        t.nodes[i] = { name = n.name, listen = n.listen, http = n.address,
                       roles = opts.roles and opts.roles[n.name] or nil }
    end
    local path = self.dir .. "/" .. file
    M.write_file(path, "-- generated by spec/helpers/node.lua\n"
        .. format("package.path = %q .. package.path\n",
                  M.fixtures .. "/?.lua;")
        .. "return " .. literal(t) .. "\n")
    return path
end

-- A cluster config for `opts` (nothing started). opts.entities
-- (required), opts.size (3), opts.secret, opts.admin_token (false: none),
-- opts.cluster, opts.seeds, opts.limits, opts.roles = { n1 = {...} },
-- opts.settings = { handoff_timeout = 2, ... } (other top-level fields),
-- where a table { __lua = "expression" } is written as that expression,
-- opts.watch = true: nodes run with --watch,
-- opts.files = { ["name.lua"] = text } written beside the config.
function M.cluster(opts)
    assert(type(opts) == "table" and type(opts.entities) == "table",
           "cluster: opts.entities is required")
    local c = setmetatable({
        opts = opts,
        dir = M.tmpdir(),
        nodes = {},
        by_name = {},
        secret = opts.secret or M.SECRET,
        admin_token = opts.admin_token == nil and M.ADMIN_TOKEN
            or opts.admin_token or nil,
    }, Cluster)
    for name, text in pairs(opts.files or {}) do
        M.write_file(c.dir .. "/" .. name, text)
    end
    c.config = c.dir .. "/cluster.lua"
    for i = 1, opts.size or 3 do
        local n = cluster_node(c, "n" .. i)
        c.nodes[i] = n
        c.by_name[n.name] = n
    end
    c:write_config("cluster.lua")
    return c
end

-- M.cluster(opts) with every node started and the view converged.
function M.cluster_up(opts, timeout)
    local c = M.cluster(opts)
    c:start()
    c:wait_converged(nil, timeout or 10)
    return c
end

-- A node that is not in the cluster's config, on fresh ports: give it a
-- config of its own (c:write_config(file, changes, { node })) in
-- node.config before node:launch().
function Cluster:new_node(name)
    return cluster_node(self, name)
end

-- A node by name ("n2") or index (2).
function Cluster:node(which)
    local n = type(which) == "number" and self.nodes[which]
        or self.by_name[which]
    return assert(n, "no node " .. tostring(which))
end

-- Nodes for a list of names, indexes or nodes; nil: every node whose
-- process runs.
function Cluster:select(list)
    local out = {}
    if list == nil then
        for _, n in ipairs(self.nodes) do
            if n.proc and n:alive() then
                out[#out + 1] = n
            end
        end
        return out
    end
    for i, x in ipairs(list) do
        out[i] = type(x) == "table" and x or self:node(x)
    end
    return out
end

-- Starts the node's process (again: a new incarnation), without waiting.
function Node:launch()
    self.runs = self.runs + 1
    self.log_path = format("%s/%s.%d.log", self.dir, self.name, self.runs)
    local argv = { M.bin, "node", self.config, "--name", self.name }
    if self.cluster and self.cluster.opts.watch then
        argv[#argv + 1] = "--watch" -- hot reload of changed modules
    end
    self.proc = M.spawn(argv, { stdout = self.log_path, stderr = "stdout" })
    self.pid = self.proc.pid
    nodes[#nodes + 1] = self
    return self
end

-- Waits until the node answers GET /v1/health; raises with its log when
-- it exits or `timeout` (10) seconds pass first.
function Node:wait_healthy(timeout)
    local deadline = M.now() + (timeout or 10)
    while true do
        if self.proc:poll() then
            error(format("node %s exited (code %s, signal %s):\n%s",
                         self.name, tostring(self.proc.code),
                         tostring(self.proc.signal), self:log()), 2)
        end
        if self:http("GET", "/v1/health", nil, { max_time = 1 }) == 200 then
            return self
        end
        if M.now() >= deadline then
            error("node " .. self.name .. " did not come up:\n" .. self:log(),
                  2)
        end
        M.sleep(0.01)
    end
end

-- Starts the nodes `list` (names or indexes; nil: all) and waits until
-- each answers HTTP (not until it is Up: see wait_converged). Returns
-- the nodes.
function Cluster:start(list, timeout)
    if list == nil then
        list = {}
        for i = 1, #self.nodes do
            list[i] = i
        end
    end
    local started_nodes = self:select(list)
    for _, n in ipairs(started_nodes) do
        n:launch()
    end
    for _, n in ipairs(started_nodes) do
        n:wait_healthy(timeout)
    end
    return started_nodes
end

-- Waits until every node of `list` (see select; nil: every running
-- node) answers /v1/members converged, listing exactly the members of
-- `list`, all Up and reachable, under one leader. Returns { [name] =
-- members answer }.
function Cluster:wait_converged(list, timeout)
    local sel = self:select(list)
    local want = {}
    for i, n in ipairs(sel) do
        want[i] = n.name
    end
    sort(want)
    want = concat(want, ",")
    return M.wait_until(function()
        local views, leader = {}, nil
        for _, n in ipairs(sel) do
            local status, view = n:http("GET", "/v1/members", nil,
                                        { max_time = 2 })
            if status ~= 200 or type(view) ~= "table" then
                return nil, n.name .. ": GET /v1/members " .. status
            end
            if not view.converged then
                return nil, n.name .. " is not converged"
            end
            local got = {}
            for _, m in ipairs(view.members) do
                if m.status ~= "up" or m.reachable == false then
                    return nil, format("%s sees %s %s%s", n.name, m.name,
                                       m.status, m.reachable == false
                                           and " (unreachable)" or "")
                end
                got[#got + 1] = m.name
            end
            sort(got)
            got = concat(got, ",")
            if got ~= want then
                return nil, n.name .. " lists " .. got
            end
            if leader and view.leader ~= leader then
                return nil, "the nodes see different leaders"
            end
            leader = view.leader
            views[n.name] = view
        end
        return views
    end, timeout or 10, "members " .. want .. " to converge", 0.05)
end

-- Last resort: kill leftovers when this module is collected or the VM
-- closes (a spec file that errored before its teardown).
M._sentinel = ffi.gc(ffi.new("uint8_t[1]"), function()
    for pid in pairs(children) do
        C.kill(pid, SIGKILL)
        C.waitpid(pid, nil, 0)
    end
end)

return M

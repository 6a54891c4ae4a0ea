-- spec/helpers/node_proc.lua: the process side of spec/helpers/node.lua
-- (which re-exports all of this; specs require "helpers.node", not this
-- module): the libc declarations through the LuaJIT FFI, a monotonic
-- clock, temp dirs and files, and child processes started with
-- posix_spawnp, stopped by PID and reaped with waitpid.
--
-- Every pid spawned here is remembered: P.leaks() lists those that still
-- exist, and a finalizer (P._sentinel) kills leftovers when the module is
-- collected or the VM closes.

local ffi = require "ffi"

local pairs, ipairs, tostring, tonumber = pairs, ipairs, tostring, tonumber
local error, assert, pcall, setmetatable = error, assert, pcall, setmetatable
local format, match = string.format, string.match
local concat, sort = table.concat, table.sort
local floor = math.floor
local io_open = io.open

local P = {}

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
        int shutdown(int fd, int how);
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

local O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC = 0, 1, 64, 512
local WNOHANG = 1
local SIGKILL, SIGTERM = 9, 15
local CLOCK_MONOTONIC = 1
local ESRCH = 3
local SIGSTOP, SIGCONT = 19, 18
P.SIGKILL, P.SIGTERM, P.SIGSTOP, P.SIGCONT = SIGKILL, SIGTERM, SIGSTOP,
    SIGCONT

-- The text of the last errno (for node_http too).
local function errtext()
    return ffi.string(C.strerror(ffi.errno()))
end
P.errtext = errtext

-------------------------------------------------------------------------------
-- Time

-- Monotonic seconds.
function P.now()
    local ts = ffi.new("struct ms_spec_timespec")
    C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
end

function P.sleep(seconds)
    C.poll(nil, 0, floor(seconds * 1000 + 0.5))
end

-- Calls fn() every `interval` seconds until it returns a truthy value,
-- which is returned. Raises "timed out after Ns waiting for WHAT" (with the
-- last value fn returned) when `timeout` seconds pass first.
function P.wait_until(fn, timeout, what, interval)
    timeout = timeout or 5
    interval = interval or 0.02
    local deadline = P.now() + timeout
    local last
    while true do
        local v, extra = fn()
        if v then
            return v, extra
        end
        last = extra
        if P.now() >= deadline then
            error(format("timed out after %gs waiting for %s%s", timeout,
                         what or "a condition",
                         last ~= nil and (" (last: " .. tostring(last) .. ")")
                             or ""), 2)
        end
        P.sleep(interval)
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

P.home = absolute(os.getenv("MOONSHARD_HOME") or cwd())
P.bin = absolute(os.getenv("MOONSHARD_BIN") or (P.home .. "/build/moonshard"))
P.fixtures = P.home .. "/spec/fixtures"

function P.read_file(path)
    local f = io_open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("*a")
    f:close()
    return s
end

function P.write_file(path, text)
    local f = assert(io_open(path, "wb"))
    f:write(text)
    f:close()
end

local tmpdirs = {}
local scratch_dir -- see P.scratch

-- A fresh, empty directory, removed by cleanup() (unless
-- MOONSHARD_KEEP_TMP is set).
function P.tmpdir()
    local template = ffi.new("char[?]", 64)
    ffi.copy(template, "/tmp/moonshard-spec-XXXXXX")
    local p = C.mkdtemp(template)
    assert(p ~= nil, "mkdtemp: " .. errtext())
    local dir = ffi.string(p)
    tmpdirs[#tmpdirs + 1] = dir
    return dir
end

function P.cleanup()
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

-- What a sanitizer prints when it finds an error in an instrumented
-- process (.ci/sanitize): ASan's and LSan's "ERROR: AddressSanitizer" /
-- "ERROR: LeakSanitizer", UBSan's "file.c:LINE:COL: runtime error: "
-- (an extended regex for grep, then the same two as Lua patterns).
local SANITIZER_ERE =
    [[ERROR: [A-Za-z]+Sanitizer|\.c:[0-9]+:[0-9]+: runtime error: ]]
local SANITIZER_LUA = { "ERROR: %a+Sanitizer",
                        "%.c:%d+:%d+: runtime error: " }

-- Sanitizer reports in the files of the temp dirs not yet cleaned up
-- (node logs, of every incarnation, and the last run's output): a list
-- of "FILE:\n<the report, from its first line, 4 KiB at most>", {} when
-- there is none. node.lua's stop_all calls it before cleanup(), so that a
-- report fails the spec file (stop_all_checked) even when the process
-- that wrote it ended by itself or was stopped by the spec.
function P.sanitizer_reports()
    local found = {}
    if #tmpdirs == 0 then
        return found
    end
    local quoted = {}
    for i, dir in ipairs(tmpdirs) do
        quoted[i] = "'" .. dir .. "'"
    end
    local f = io.popen("grep -rlaE '" .. SANITIZER_ERE .. "' "
                       .. concat(quoted, " ") .. " 2>/dev/null")
    for path in f:lines() do
        local text = P.read_file(path) or ""
        local at
        for _, pat in ipairs(SANITIZER_LUA) do
            local i = string.find(text, pat)
            if i and (not at or i < at) then
                at = i
            end
        end
        at = at or 1
        while at > 1 and string.sub(text, at - 1, at - 1) ~= "\n" do
            at = at - 1
        end
        found[#found + 1] = path .. ":\n" .. string.sub(text, at, at + 4095)
    end
    f:close()
    return found
end

-------------------------------------------------------------------------------
-- Processes
local children = {} -- [pid] = proc, until reaped
local started = {}  -- every pid spawned by this spec file
P.children = children -- for node.lua's stop_all

local Proc = {}
Proc.__index = Proc

-- Starts argv[1] (searched in PATH) with argv. opts: stdout, stderr (file
-- paths; default /dev/null; stderr = "stdout" shares stdout's file).
-- Returns a proc; never blocks.
function P.spawn(argv, opts)
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
    local deadline = P.now() + (timeout or 10)
    local pause = 0.001
    while not self:poll() do
        if P.now() >= deadline then
            return false
        end
        P.sleep(pause)
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
function P.pid_alive(pid)
    if C.kill(pid, 0) ~= 0 then
        return ffi.errno() ~= ESRCH
    end
    local stat = P.read_file("/proc/" .. pid .. "/stat")
    if stat and match(stat, "^%d+ %b() Z") then
        return false
    end
    return true
end

-- PIDs started by this helper (in this spec file) and not reaped yet.
function P.running()
    local list = {}
    for pid in pairs(children) do
        list[#list + 1] = pid
    end
    sort(list)
    return list
end

-- The leak check: PIDs this spec file started that still exist, reaped or
-- not. Call it after stop_all(); it should be {}.
function P.leaks()
    local list = {}
    for _, pid in ipairs(started) do
        if children[pid] or P.pid_alive(pid) then
            list[#list + 1] = pid
        end
    end
    return list
end

-- Runs argv to completion (killed after `timeout` seconds). Returns
-- code (nil when killed by a signal), stdout, stderr, signal.
function P.run(argv, timeout)
    local dir = P.scratch()
    local out, err = dir .. "/run.out", dir .. "/run.err"
    local p = P.spawn(argv, { stdout = out, stderr = err })
    if not p:wait(timeout or 20) then
        p:terminate(1)
        error(format("%s did not finish within %gs", concat(argv, " "),
                     timeout or 20), 2)
    end
    return p.code, P.read_file(out) or "", P.read_file(err) or "", p.signal
end

-- Runs argv like P.run; raises with its output unless it exits 0.
-- Returns stdout.
function P.must(argv, timeout)
    local code, out, err = P.run(argv, timeout)
    if code ~= 0 then
        error(format("%s exited %s:\n%s\n%s", concat(argv, " "),
                     tostring(code), out, err), 2)
    end
    return out
end

-- 1 when `path` exists (a file, a folder or a link).
function P.exists(path)
    return P.run({ "test", "-e", path }) == 0
end

-- Runs the moonshard binary: P.moonshard("shard", "--count", "8", "a").
function P.moonshard(...)
    local argv = { P.bin, ... }
    return P.run(argv)
end

-- A temp dir for request and response files of this spec file.
function P.scratch()
    if not scratch_dir then
        scratch_dir = P.tmpdir()
    end
    return scratch_dir
end

-- Last resort: kill leftovers when this module is collected or the VM
-- closes (a spec file that errored before its teardown).
P._sentinel = ffi.gc(ffi.new("uint8_t[1]"), function()
    for pid in pairs(children) do
        C.kill(pid, SIGKILL)
        C.waitpid(pid, nil, 0)
    end
end)

return P

-- spec/helpers/webdriver.lua: a headless Chromium for the status page's
-- specs (spec/03-integration/ui_spec.lua, spec/04-postgres/
-- ui_lease_spec.lua), driven through chromedriver's WebDriver HTTP API
-- on 127.0.0.1. Debian's `chromium` and `chromium-driver` (.ci/deps); a
-- missing one raises, so the spec fails: it never skips.
--
--     local webdriver = require "helpers.webdriver"
--     local b = webdriver.start()          -- chromedriver + a session
--     b:open("http://127.0.0.1:7201/ui")
--     b:js("return document.title;")       -- a function body, run there
--     b:severe()                           -- console errors since last call
--     b:screenshot(path)                   -- a PNG file
--     b:close()                            -- session, driver, leftovers
--
-- chromedriver is started by PID (helpers.spawn) on a free port; the
-- session runs chromium headless with --no-sandbox (the specs run as
-- root) and its own profile folder, with the browser's console log on.
-- close() deletes the session (chromedriver then ends its chromium),
-- stops chromedriver by PID, and returns the PIDs of any process of that
-- profile still there after 10 s (each then killed by its PID), so the
-- spec can fail on a leak.

local helpers = require "helpers.node"

local cjson = helpers.json
local format, concat = string.format, table.concat
local floor = math.floor
local type, tostring, tonumber, ipairs = type, tostring, tonumber, ipairs
local error, assert, setmetatable, pcall = error, assert, setmetatable, pcall
local luassert = require "luassert"

local M = {}

local Browser = {}
Browser.__index = Browser

-- One HTTP exchange with chromedriver, which keeps its connections open:
-- the response ends by its Content-Length, not by EOF. Returns the
-- status (0: no answer), the decoded body and the raw body.
local function exchange(port, method, path, body, max_time)
    local conn, why = helpers.tcp_open(port)
    if not conn then return 0, nil, why end
    assert(conn:send(helpers.format_request(port, method, path, body, true)))
    local got, deadline = "", helpers.now() + max_time
    local head_end, len
    while helpers.now() < deadline do
        local more, closed = conn:read(0.02)
        got = got .. more
        head_end = head_end or got:find("\r\n\r\n", 1, true)
        if head_end and not len then
            len = tonumber(got:sub(1, head_end):lower()
                           :match("\ncontent%-length: *(%d+)"))
        end
        if (len and #got >= head_end + 3 + len) or closed then break end
    end
    conn:close()
    local status = tonumber(got:match("^HTTP/1%.%d (%d%d%d)")) or 0
    local raw = head_end and got:sub(head_end + 4,
                                     head_end + 3 + (len or #got)) or ""
    return status, cjson.decode(raw), raw
end

-- A WebDriver command; returns its "value", raises on an error status.
function Browser:wd(method, path, body, max_time)
    local st, b, raw = exchange(self.port, method, path, body,
                                max_time or 60)
    if st ~= 200 or type(b) ~= "table" then
        error(format("WebDriver %s %s: %s %s", method, path, tostring(st),
                     tostring(raw):sub(1, 500)), 2)
    end
    return b.value
end

-- Base64 (a WebDriver screenshot) to bytes.
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_VAL = {}
for i = 1, #B64 do B64_VAL[B64:byte(i)] = i - 1 end

local function unbase64(s)
    local out, acc, bits = {}, 0, 0
    for i = 1, #s do
        local v = B64_VAL[s:byte(i)]
        if v then
            acc = acc * 64 + v
            bits = bits + 6
            if bits >= 8 then
                bits = bits - 8
                local byte = floor(acc / 2 ^ bits)
                out[#out + 1] = string.char(byte)
                acc = acc - byte * 2 ^ bits
            end
        end
    end
    return concat(out)
end
M.unbase64 = unbase64

-- The pids whose command line names `needle` (read from /proc).
local function pids_naming(needle)
    local found = {}
    local ls = helpers.must({ "ls", "/proc" })
    for pid in ls:gmatch("(%d+)") do
        local cmd = helpers.read_file("/proc/" .. pid .. "/cmdline")
        if cmd and cmd:find(needle, 1, true) then
            found[#found + 1] = tonumber(pid)
        end
    end
    return found
end

-- Starts chromedriver and a headless session (window w x h, 1280 x 1040
-- unless given). Raises when either cannot start.
function M.start(w, h)
    local dir = helpers.tmpdir()
    local b = setmetatable({ port = helpers.free_port(),
                             profile = dir .. "/chromium-profile",
                             log = dir .. "/chromedriver.log",
                             console = {} }, Browser)
    b.driver = helpers.spawn({ "chromedriver", "--port=" .. b.port },
                             { stdout = b.log, stderr = "stdout" })
    helpers.wait_until(function()
        if b.driver:poll() then
            error("chromedriver exited: " .. (helpers.read_file(b.log)
                                              or ""))
        end
        local st, body = exchange(b.port, "GET", "/status", nil, 2)
        return st == 200 and type(body) == "table" and body.value.ready
    end, 20, "chromedriver to be ready", 0.1)
    local caps = b:wd("POST", "/session", {
        capabilities = { alwaysMatch = {
            browserName = "chrome",
            ["goog:chromeOptions"] = { args = {
                "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage",
                format("--window-size=%d,%d", w or 1280, h or 1040),
                "--hide-scrollbars", "--user-data-dir=" .. b.profile,
            } },
            ["goog:loggingPrefs"] = { browser = "ALL" },
        } },
    }, 120)
    b.session = caps.sessionId
    assert(type(b.session) == "string", "no WebDriver session id")
    return b
end

function Browser:open(url)
    return self:wd("POST", "/session/" .. self.session .. "/url",
                   { url = url })
end

-- Runs `script` (a function body) in the page; its return value.
function Browser:js(script)
    return self:wd("POST", "/session/" .. self.session .. "/execute/sync",
                   '{"script":' .. cjson.encode(script) .. ',"args":[]}')
end

-- The console's entries since the last call (all kept in self.console);
-- returns the messages of those of level SEVERE (errors).
function Browser:severe()
    local got = self:wd("POST", "/session/" .. self.session .. "/se/log",
                        { type = "browser" })
    local bad = {}
    for _, e in ipairs(got) do
        self.console[#self.console + 1] = e
        if e.level == "SEVERE" then bad[#bad + 1] = e.message end
    end
    return bad
end

-- Saves a PNG of the window to `path`; returns its bytes.
function Browser:screenshot(path)
    local png = unbase64(self:wd("GET", "/session/" .. self.session
                                 .. "/screenshot"))
    assert(png:sub(1, 4) == "\137PNG", "the screenshot is no PNG")
    helpers.write_file(path, png)
    return png
end

-- Ends the session and chromedriver (by PID); returns the PIDs of the
-- profile's processes that outlived them (killed by PID), {} normally.
function Browser:close()
    if self.session then
        pcall(self.wd, self, "DELETE", "/session/" .. self.session)
        self.session = nil
    end
    self.driver:terminate(5)
    pcall(helpers.wait_until, function()
        return #pids_naming(self.profile) == 0
    end, 10, "chromium to exit", 0.1)
    local left = pids_naming(self.profile)
    for _, pid in ipairs(left) do
        helpers.run({ "kill", "-KILL", tostring(pid) })
    end
    return left
end

-- A browser spec's teardown: closes `browser` (nil: none was started),
-- stops every process the spec started (helpers.stop_all_checked), runs
-- `also` (another cleanup, as pg.stop_all) when given, then asserts that
-- no node leaked and that no chromium process outlived its session.
function M.teardown(browser, also)
    local left = browser and browser:close() or {}
    helpers.stop_all_checked()
    if also then
        also()
    end
    luassert.same({}, helpers.leaks())
    luassert.same({}, left) -- no chromium process outlived its session
end

return M

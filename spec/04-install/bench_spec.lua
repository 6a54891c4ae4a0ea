-- spec/04-install/bench_spec.lua: the benchmarks out of the product
-- (issue 10, point 5). `moonshard-bench` is built beside `moonshard`
-- (bench/), runs the benches and prints their figures; an install of the
-- same build (cmake --install into a temporary prefix) holds no
-- moonshard-bench, its `moonshard` no bench symbols, and `moonshard
-- bench` only points to the other executable. Figures are checked for
-- presence and sense (positive rates, the runs' own consistency checks),
-- never against a speed.

local helpers = require "helpers.node"

local format = string.format

local must, exists = helpers.must, helpers.exists

local build = helpers.bin:match("^(.*)/[^/]+$")
local bench = build .. "/moonshard-bench"

-- The number a figure line of `out` gives, found by a pattern with one
-- capture; raises with the output when the line is missing.
local function figure(out, pattern)
    local v = out:match(pattern)
    assert(v, format("no line matching %q in:\n%s", pattern, out))
    return tonumber(v)
end

-- Asserts that `share`, printed as a rate's share of a floor, is the rate
-- `r` over the printed floor `base` (to the rounding of the printed
-- figures: rates whole, shares to 0.01).
local function assert_share(out, base, r, share)
    assert(math.abs(tonumber(share) - tonumber(r) / tonumber(base)) <= 0.0051,
           format("%s / %s is not %s in:\n%s", r, base, share, out))
end

describe("moonshard-bench", function()
    teardown(function()
        helpers.stop_all_checked()
        helpers.cleanup()
    end)

    it("is built beside moonshard", function()
        assert.is_true(exists(bench), bench .. " is missing")
    end)

    it("local prints its figures", function()
        local code, out, err = helpers.run({ bench, "local", "--ids", "1000",
                                             "--messages", "2000" }, 120)
        assert.are.equal(0, code, err)
        assert.is_true(figure(out, "\n  floor %(.-%):%s+(%d+) msg/s") > 0)
        assert.is_true(figure(out, "\n    of which cjson.decode of the "
                                   .. "payload alone:%s+(%d+) msg/s") > 0)
        assert.is_true(figure(out,
            "\n  tells through the runtime %(2000 over 1000 ids%):%s+(%d+)"
            .. " msg/s") > 0)
        assert.is_true(figure(out,
            "\n  tells / floor, median of the paired rounds:%s+([%d.]+)")
            > 0)
        assert.is_true(figure(out, "\n  asks %(.-%):%s+(%d+) asks/s") > 0)
        assert.is_true(figure(out,
            "\n  activations %(first message to 1000 ids%):%s+(%d+) /s") > 0)
        assert.is_number(figure(out,
            "\n  memory per idle activated entity %(RSS delta%):%s+(%-?%d+)"
            .. " bytes"))
        -- the floor in a VM with the node's collector pace (the default,
        -- gc_headroom_mb 64), with the runtime against it
        assert.is_true(figure(out, "\n  the floor with the node's collector "
                                   .. "pace %(gc_headroom_mb 64%):%s+(%d+) "
                                   .. "msg/s  tells / it [%d.]+, asks / it "
                                   .. "[%d.]+") > 0)
        assert.are.equal(1000, figure(out, "entities active: (%d+),"))
        assert.are.equal(0, figure(out, "handler errors: (%d+)"))
        assert.are.equal(0, figure(out, "asks/s  ratio to floor [%d.]+"
                                        .. "  failed (%d+)"))
        -- the floor from bytes, with a tell's payload and an ask's
        local rate, ratio = out:match("\n    with a tell's payload:%s+(%d+)"
                                      .. " msg/s  tells / it ([%d.]+)")
        assert.is_truthy(rate, out)
        assert.is_true(tonumber(rate) > 0 and tonumber(ratio) > 0, out)
        rate, ratio = out:match("\n    with an ask's, its reply encoded:"
                                .. "%s+(%d+) msg/s  asks / it ([%d.]+)")
        assert.is_truthy(rate, out)
        assert.is_true(tonumber(rate) > 0 and tonumber(ratio) > 0, out)
        -- the queue floor: states made back to back and by first messages,
        -- with tells, then with asks; each a rate, its share of the floor
        -- (of the floor printed above: the rate over it, to the rounding of
        -- the printed figures) and the runtime's ratio to it
        local floor = figure(out, "\n  floor %(.-%):%s+(%d+) msg/s")
        for _, line in ipairs({
            "\n    its states made back to back, tells:%s+(%d+) msg/s  "
                .. "([%d.]+) of the floor, tells / it ([%d.]+)",
            "\n    made by first messages, as a runtime's, tells:%s+(%d+) "
                .. "msg/s  ([%d.]+) of the floor, tells / it ([%d.]+)",
            "\n    made so, asks, each reply encoded, sent back:%s*(%d+) "
                .. "msg/s  ([%d.]+) of the floor, asks / it ([%d.]+)",
        }) do
            local r, share, rt = out:match(line)
            assert.is_truthy(r, line .. " in:\n" .. out)
            assert.is_true(tonumber(r) > 0 and tonumber(share) > 0
                           and tonumber(rt) > 0, out)
            assert_share(out, floor, r, share)
        end
        -- the ids in a fixed random order: the queue floor and the tells,
        -- paired
        local qr, qshare = out:match("\n    the queue floor, states made by "
                                     .. "first messages:%s*(%d+) msg/s  "
                                     .. "([%d.]+) of the floor")
        assert.is_truthy(qr, out)
        assert.is_true(tonumber(qr) > 0 and tonumber(qshare) > 0, out)
        assert_share(out, floor, qr, qshare)
        local tr, tshare, tq = out:match("\n    tells through the runtime:"
                                         .. "%s+(%d+) msg/s  ([%d.]+) of the "
                                         .. "floor, / the queue floor "
                                         .. "([%d.]+)")
        assert.is_truthy(tr, out)
        assert.is_true(tonumber(tr) > 0 and tonumber(tshare) > 0
                       and tonumber(tq) > 0, out)
        assert_share(out, floor, tr, tshare)
    end)

    it("local --asks sets the asks, and --asks 0 runs none", function()
        local code, out, err = helpers.run({ bench, "local", "--ids", "1000",
                                             "--messages", "1000",
                                             "--asks", "3000" }, 120)
        assert.are.equal(0, code, err)
        assert.is_true(figure(out, "\n  asks %(3000, %d+ in flight%):%s+(%d+)"
                                   .. " asks/s") > 0)
        code, out, err = helpers.run({ bench, "local", "--ids", "1000",
                                       "--messages", "1000", "--asks",
                                       "0" }, 120)
        assert.are.equal(0, code, err)
        assert.is_nil(out:find("\n  asks ", 1, true), out)
        assert.is_nil(out:find("with an ask's", 1, true), out)
        assert.is_nil(out:find("made so, asks", 1, true), out)
        assert.is_truthy(out:find("made by first messages, as a runtime's",
                                  1, true), out)
        assert.is_truthy(out:find("with a tell's payload", 1, true), out)
    end)

    -- the active-entity limit's rows: a second node full at its limit,
    -- the hot set within it (nothing passivated then), the fresh ids each
    -- evicting one; 2 is the smallest limit, below the 64 entities of the
    -- warm-up, and 100 leaves the hot set 50 ids, under the 1,000 that
    -- the bench sends before the node delivers (in its own order)
    it("local --max-active holds the limit and checks its counts",
       function()
        for _, limit in ipairs({ 100, 2 }) do
            local code, out, err = helpers.run({ bench, "local", "--ids",
                "1000", "--messages", "1000", "--asks", "0",
                "--max-active", tostring(limit) }, 120)
            assert.are.equal(0, code, out .. err)
            local active, evicted, hot, errors = out:match(
                "\n    limited node: active (%d+), passivated for the limit "
                .. "(%d+) %((%d+) during the hot tells%), handler errors "
                .. "(%d+)\n")
            assert.is_truthy(active, out)
            assert.are.equal(limit, tonumber(active))
            -- the fill (1000 - limit), then 5 rounds of 200 new ids
            assert.are.equal(1000 - limit + 5 * 200, tonumber(evicted))
            assert.are.equal(0, tonumber(hot))
            assert.are.equal(0, tonumber(errors))
            assert.is_true(figure(out, "\n    tells to %d+ hot ids, within "
                                       .. "the limit:%s+(%d+) msg/s") > 0)
            assert.is_true(figure(out, "\n    first messages to 200 new "
                                       .. "ids, each evicting:%s*(%d+) /s")
                           > 0)
        end
    end)

    it("local --gc-headroom 0 runs the node with LuaJIT's pause", function()
        local code, out, err = helpers.run({ bench, "local", "--ids", "1000",
                                             "--messages", "2000",
                                             "--asks", "0",
                                             "--gc-headroom", "0" }, 120)
        assert.are.equal(0, code, err)
        assert.is_nil(out:find("collector's pace", 1, true))
        assert.is_true(figure(out,
            "\n  tells / floor, median of the paired rounds:%s+([%d.]+)")
            > 0)
    end)

    it("local refuses bad options", function()
        local code = helpers.run({ bench, "local", "--ids", "10" })
        assert.are.equal(2, code)
        code = helpers.run({ bench, "local", "--nope" })
        assert.are.equal(2, code)
        code = helpers.run({ bench, "local", "--asks", "-1" })
        assert.are.equal(2, code)
        code = helpers.run({ bench, "local", "--gc-headroom", "1025" })
        assert.are.equal(2, code)
        code = helpers.run({ bench, "local", "--gc-headroom", "-2" })
        assert.are.equal(2, code)
        code = helpers.run({ bench, "nope" })
        assert.are.equal(2, code)
    end)

    -- `relay` (bench/relay.c): the baseline of a remote ask's two hops,
    -- run in front of Redis by `all`; here in front of a node's gateway
    -- and of sockets of the spec's own.

    -- Starts `relay --to to` (with --listen `listen` when given) and waits
    -- for the port line it prints. Returns the process and that port.
    local function start_relay(to, listen)
        local out = helpers.tmpdir() .. "/port"
        local argv = { bench, "relay", "--to", to }
        if listen then
            argv[#argv + 1], argv[#argv + 2] = "--listen", listen
        end
        local relay = helpers.spawn(argv, { stdout = out })
        helpers.wait_until(function()
            return (helpers.read_file(out) or ""):find("\n")
        end, 10, "the relay's port line")
        return relay, tonumber(helpers.read_file(out))
    end

    it("relay carries a connection's bytes both ways, in order, and ends "
       .. "as its sides end", function()
        local n = helpers.start({ entities = { Counter = { module = "counter" } } })
        local port = helpers.free_port()
        local relay, said = start_relay(n.port, port)
        assert.are.equal(port, said)
        -- 1,000 tells and an ask in one write (about 150 KB: more than
        -- one read of the relay's, answers read back in order)
        local N, reqs = 1000, {}
        local tell = helpers.entity_path("Counter", "r1", "tell")
        for i = 1, N do
            reqs[i] = helpers.format_request(port, "POST", tell,
                                             { type = "incr" }, false)
        end
        reqs[N + 1] = helpers.format_request(port, "POST",
            helpers.entity_path("Counter", "r1", "ask"), { type = "get" },
            true)
        local res = helpers.pipeline(port, reqs, 60)
        assert.are.equal(N + 1, #res)
        for i = 1, N do
            assert.are.equal(202, res[i].status, res[i].raw)
        end
        assert.are.equal(200, res[N + 1].status)
        assert.are.same({ value = N }, res[N + 1].body)
        -- a half close: the client ends its sending after a request; the
        -- relay ends its sending to the node after the request, and the
        -- answer still comes back before the node closes
        local c = assert(helpers.tcp_open(port))
        assert(c:send(helpers.format_request(port, "POST",
            helpers.entity_path("Counter", "r1", "ask"), { type = "get" },
            false)))
        assert.is_true(c:shutdown())
        local got, closed = c:read(10)
        c:close()
        assert.is_truthy(got:find("^HTTP/1%.1 200 "), got)
        assert.is_truthy(got:find('{"value":' .. N .. '}', 1, true), got)
        assert.is_true(closed, "the relay did not close after both ends")
        -- upstream gone: a connection through the relay is closed with
        -- nothing read, and the relay runs on
        n:stop()
        local none, why, gone = helpers.tcp_exchange(port, "GET / HTTP/1.1"
            .. "\r\n\r\n", 10)
        assert.are.equal("", none, why)
        assert.is_true(gone)
        assert.is_false(relay:poll(), "the relay exited")
        relay:terminate()
        assert.are.equal(15, relay.signal) -- SIGTERM: it runs until killed
    end)

    -- A listening socket of the spec's own on 127.0.0.1 (a free port): an
    -- upstream for the relay that the spec drives with send/recv (and
    -- closes). Returns its fd and port.
    local function upstream_listener()
        local ffi = require "ffi"
        local C = ffi.C
        if not pcall(function() return C.listen end) then
            ffi.cdef [[
                int listen(int fd, int backlog);
                int accept(int fd, void *addr, void *len);
            ]]
        end
        local lfd = C.socket(2, 1, 0)
        assert.is_true(lfd >= 0)
        local sa = ffi.new("struct ms_spec_sockaddr_in")
        sa.family = 2
        sa.addr[0], sa.addr[1], sa.addr[2], sa.addr[3] = 127, 0, 0, 1
        local len = ffi.new("uint32_t[1]", ffi.sizeof(sa))
        assert.are.equal(0, C.bind(lfd, sa, ffi.sizeof(sa)))
        assert.are.equal(0, C.listen(lfd, 4))
        assert.are.equal(0, C.getsockname(lfd, sa, len))
        return lfd, sa.port[0] * 256 + sa.port[1]
    end

    -- A connection through the relay on `port`: the client's end (a
    -- helpers.tcp_open connection) and the upstream's end, accepted on
    -- the listener `lfd`.
    local function through(port, lfd)
        local c = assert(helpers.tcp_open(port))
        local ufd = require("ffi").C.accept(lfd, nil, nil)
        assert.is_true(ufd >= 0)
        return c, ufd
    end

    it("relay holds back a fast sender while the other side does not read, "
       .. "and loses nothing", function()
        local ffi = require "ffi"
        local C = ffi.C
        -- the upstream: a socket of this spec's, read only later
        local lfd, uport = upstream_listener()
        local relay, port = start_relay(uport)
        local c, ufd = through(port, lfd)
        -- both sockets wait at most 0.2 s a call
        local tv = ffi.new("struct ms_spec_timeval", 0, 200000)
        C.setsockopt(c.fd, 1, 21, tv, ffi.sizeof(tv)) -- SO_SNDTIMEO
        C.setsockopt(ufd, 1, 20, tv, ffi.sizeof(tv))  -- SO_RCVTIMEO
        -- 64 MB of numbered 16-byte lines (more than the buffers of the
        -- sockets on the way can hold), sent until the relay stops
        -- taking them (the upstream reads nothing yet)
        local TOTAL, CHUNK = 64 * 1024 * 1024, 65536
        local parts = {}
        for i = 0, CHUNK / 16 - 1 do parts[#parts + 1] = ("%015d\n"):format(i) end
        local block = table.concat(parts)
        local function chunk(k) -- chunk k: the block with its number in front
            return ("%015d\n"):format(k) .. block:sub(17)
        end
        local sent, k = 0, 0
        -- sends what the socket takes now (flags: MSG_NOSIGNAL, and
        -- MSG_DONTWAIT when `now`); false when it took nothing
        local function send_some(now)
            local data = chunk(k)
            local off = sent % CHUNK
            local n = C.send(c.fd, ffi.cast("const char *", data) + off,
                             CHUNK - off, 0x4000 + (now and 0x40 or 0))
            if n <= 0 then return false end
            sent = sent + tonumber(n)
            if sent % CHUNK == 0 then k = k + 1 end
            return true
        end
        -- until a send waited 0.2 s in vain
        while sent < TOTAL and send_some(false) do end
        assert.is_true(sent < TOTAL / 2, "the relay took " .. sent
                       .. " bytes of 64 MB with nobody reading")
        -- now the upstream reads, the client sends the rest
        local got, buf = {}, ffi.new("char[65536]")
        local received, deadline = 0, helpers.now() + 60
        while received < TOTAL and helpers.now() < deadline do
            while sent < TOTAL and send_some(true) do end
            local n = C.recv(ufd, buf, 65536, 0)
            if n > 0 then
                got[#got + 1] = ffi.string(buf, n)
                received = received + tonumber(n)
            elseif n == 0 then
                break
            end
        end
        c:close()
        C.close(ufd)
        C.close(lfd)
        assert.are.equal(TOTAL, received)
        local all = table.concat(got)
        for j = 0, TOTAL / CHUNK - 1 do
            if all:sub(j * CHUNK + 1, (j + 1) * CHUNK) ~= chunk(j) then
                error("chunk " .. j .. " differs")
            end
        end
        relay:terminate()
        assert.are.equal(15, relay.signal)
    end)

    it("relay runs on when a client goes while the other side still "
       .. "sends", function()
        local ffi = require "ffi"
        local C = ffi.C
        local lfd, uport = upstream_listener()
        -- started by helpers.spawn, so with SIGPIPE's default action (as
        -- from a shell): a write to a connection its peer reset raises it
        local relay, port = start_relay(uport)
        local c, ufd = through(port, lfd)
        local tv = ffi.new("struct ms_spec_timeval", 0, 200000)
        C.setsockopt(ufd, 1, 21, tv, ffi.sizeof(tv)) -- SO_SNDTIMEO
        -- the client goes at once; the upstream sends on (the relay's
        -- writes to the client meet its reset) until the relay closes
        -- the upstream's connection
        c:close()
        local block = ("x"):rep(65536)
        local deadline, closed = helpers.now() + 10, false
        while helpers.now() < deadline do
            local n = C.send(ufd, block, #block, 0x4000) -- MSG_NOSIGNAL
            if n < 0 and ffi.errno() ~= 11 and ffi.errno() ~= 4 then
                closed = true -- EPIPE or ECONNRESET: the relay closed it
                break
            end
        end
        C.close(ufd)
        -- (a killed process's sockets close a moment before it is reaped)
        assert.is_false(relay:wait(0.5), "the relay exited (signal "
                        .. tostring(relay.signal) .. ")")
        assert.is_true(closed, "the relay kept the upstream's connection")
        -- and it still relays a new connection
        local c2, ufd2 = through(port, lfd)
        assert(c2:send("ping"))
        local buf = ffi.new("char[16]")
        local n = C.recv(ufd2, buf, 16, 0)
        c2:close()
        C.close(ufd2)
        C.close(lfd)
        assert.are.equal("ping", ffi.string(buf, math.max(tonumber(n), 0)))
        relay:terminate()
        assert.are.equal(15, relay.signal)
    end)

    it("relay refuses bad arguments", function()
        for _, argv in ipairs({ {}, { "--to", "0" }, { "--to", "70000" },
                                { "--to", "x" }, { "--listen", "1" },
                                { "--to", "1", "--listen" },
                                { "--to", "1", "--nope", "2" } }) do
            local code, _, err = helpers.run({ bench, "relay",
                                               unpack(argv) })
            assert.are.equal(2, code)
            assert.is_truthy(err:find("moonshard-bench relay: ", 1, true),
                             err)
        end
    end)

    -- `all`: the table of issue 16. Its header, then one line per selected
    -- row: name, measure, figure, baseline, ratio, target, result.
    local ALL_HEADER = "\n  row%s+measure: figure / baseline%s+figure%s+"
                       .. "baseline%s+ratio%s+target%s+result\n"

    it("all prints a table row with its figure, baseline, ratio and target",
       function()
        local code, out, err = helpers.run({ bench, "all", "--only", "tells",
                                             "--seconds", "0.1" }, 120)
        assert.are.equal(0, code, out .. err)
        assert.is_truthy(out:find(ALL_HEADER), out)
        local fig, base, ratio, result = out:match(
            "\n  tells%s+local tell/s / LuaJIT floor msg/s%s+(%d+)%s+(%d+)"
            .. "%s+([%d.]+)%s+>= 0%.75%s+([%a ]-)\n")
        assert.is_truthy(fig, out)
        assert.is_true(tonumber(fig) > 0 and tonumber(base) > 0, out)
        assert.is_true(tonumber(ratio) > 0, out)
        assert.are.equal(tonumber(ratio) >= 0.75 and "met" or "not met",
                         result)
        -- its notes: the queue floor's rates, each with its share of the
        -- row's baseline (the same floor: the rate over it, to the
        -- rounding of the printed figures)
        local q, qs, qa, qas = out:match(
            "\n         back to back: (%d+) msg/s %(([%d.]+) of the floor%), "
            .. "tells / it [%d.]+; made by\n         first messages, as a "
            .. "runtime's: (%d+) msg/s %(([%d.]+)%), tells / it [%d.]+\n")
        assert.is_truthy(q, out)
        assert_share(out, base, q, qs)
        assert_share(out, base, qa, qas)
        local sq, sqs, st, sts = out:match(
            "\n         first messages, (%d+) msg/s %(([%d.]+)%), tells (%d+) "
            .. "msg/s %(([%d.]+)%), tells / it [%d.]+\n")
        assert.is_truthy(sq, out)
        assert_share(out, base, sq, sqs)
        assert_share(out, base, st, sts)
        -- only the selected row
        assert.is_nil(out:find("\n  asks ", 1, true), out)
        assert.is_nil(out:find("\n  remote ", 1, true), out)
    end)

    it("all's memory row is the median of five activations, each in a "
       .. "fresh process", function()
        local code, out, err = helpers.run({ bench, "all", "--only",
                                             "memory" }, 300)
        assert.are.equal(0, code, out .. err)
        local fig, result = out:match(
            "\n  memory%s+bytes per idle Counter, 1,000,000 on a node%s+"
            .. "(%d+)%s+%-%s+%-%s+<= 300%s+([%a ]-)\n")
        assert.is_truthy(fig, out)
        fig = tonumber(fig)
        assert.are.equal(fig <= 300 and "met" or "not met", result)
        local each = out:match("each in a\n%s+fresh process:([%d ]+) bytes "
                               .. "an entity\n")
        assert.is_truthy(each, out)
        local v = {}
        for b in each:gmatch("%d+") do v[#v + 1] = tonumber(b) end
        assert.are.equal(5, #v, out)
        for _, b in ipairs(v) do
            -- an idle Counter's RSS: its state, record and id at least
            assert.is_true(b > 100 and b < 2000, out)
        end
        table.sort(v)
        -- the figures are printed rounded: the median within one byte
        assert.is_true(math.abs(fig - v[3]) <= 1, out)
        -- every child said it reached all 1,000,000 ids
        assert.is_truthy(out:find("1000000 ids (all active after it,", 1,
                                  true), out)
    end)

    it("all says why a memory activation's child died of a signal",
       function()
        -- a soft CPU limit of 1 s: the parent only waits, the child (the
        -- limit is inherited, its CPU time starts at 0) gets SIGXCPU long
        -- before its 1,000,000 ids are active; no core file
        local code, out, err = helpers.run({ "sh", "-c",
            'ulimit -c 0; ulimit -S -t 1; exec "$0" all --only memory',
            bench }, 120)
        assert.are.equal(1, code, out .. err)
        assert.is_truthy(out:find("\n  memory%s+bytes per idle Counter[^\n]-"
                                  .. "failed: an activation failed"), out)
        assert.is_truthy(err:find("the memory row's child was killed by "
                                  .. "signal %d+ %("), err)
    end)

    it("all says a row is skipped when its tool is not installed", function()
        -- a PATH without wrk and Redis: an empty folder
        local empty = helpers.tmpdir() .. "/empty-path"
        must({ "mkdir", "-p", empty })
        local code, out, err = helpers.run({ "env", "PATH=" .. empty, bench,
            "all", "--only", "remote,p99", "--seconds", "0.1" }, 60)
        assert.are.equal(0, code, out .. err)
        assert.is_truthy(out:find(ALL_HEADER), out)
        assert.is_truthy(out:find("\n  remote%s+remote ask/s[^\n]-"
                                  .. "skipped: wrk not installed\n"), out)
        -- p99 needs Redis only (its caller is the bench's own client)
        assert.is_truthy(out:find("\n  p99%s+p99 ms[^\n]-"
                                  .. "skipped: Redis not installed"), out)
        -- skipped before starting anything
        assert.is_nil(err:find("starting n1", 1, true), err)
    end)

    it("all refuses bad options", function()
        for _, argv in ipairs({ { "--only", "nope" }, { "--seconds", "0" },
                                { "--only" }, { "--nope" } }) do
            local code = helpers.run({ bench, "all", unpack(argv) })
            assert.are.equal(2, code)
        end
    end)

    it("cluster runs moonshard from beside itself and checks its routes",
       function()
        -- without MOONSHARD_BIN: the moonshard beside moonshard-bench
        local code, out, err = helpers.run({ "env", "-u", "MOONSHARD_BIN",
            bench, "cluster", "--seconds", "0.2", "--ids", "2" }, 120)
        assert.are.equal(0, code, out .. err)
        local a1, a50 = out:match(
            "\n  moonshard remote ask/s%s+(%d+)%s+(%d+)")
        local t1, t50 = out:match(
            "\n  moonshard remote tell/s%s+(%d+)%s+(%d+)")
        assert.is_truthy(a1 and t1, out)
        for _, v in ipairs({ a1, a50, t1, t50 }) do
            assert.is_true(tonumber(v) > 0, out)
        end
        local remote, total = out:match(
            "checks: n1 routed (%d+) of (%d+) requests remotely")
        assert.is_truthy(remote, out)
        assert.are.equal(total, remote)
        local sum, accepted, failed = out:match(
            "the counters sum to (%d+) of (%d+) accepted tells; (%d+) failed")
        assert.are.equal(accepted, sum)
        assert.are.equal("0", failed)
    end)

    it("cluster says so when it finds no moonshard to run", function()
        local code, _, err = helpers.run({ "env",
            "MOONSHARD_BIN=" .. helpers.tmpdir() .. "/none", bench,
            "cluster", "--seconds", "0.2", "--ids", "2" }, 60)
        assert.are.equal(1, code)
        assert.is_truthy(err:find("MOONSHARD_BIN", 1, true), err)
    end)

    -- needs persistent types (issue 11's leases and persistent behaviors)
    it("persist prints pgbench's tps, committed asks and their ratio",
       function()
        local code, out, err = helpers.run({ bench, "persist", "--seconds",
                                             "1", "--ids", "20" }, 180)
        assert.is_true(figure(out, "\n  pgbench, one single%-row INSERT "
                              .. "per transaction:%s+(%d+) tps") > 0)
        assert.is_truthy(out:find("synchronous_commit = on for both", 1,
                                  true), out)
        assert.are.equal(0, code, out .. err)
        assert.is_true(figure(out, "\n  moonshard, committed asks %(event"
                              .. "%-sourced Counter, 20 ids%):%s+(%d+) "
                              .. "asks/s") > 0)
        assert.is_true(figure(out, "committed asks/s / pgbench tps:%s+"
                              .. "([%d.]+)") > 0)
        local ok, failed, events, answered = out:match(
            "checks: (%d+) asks answered, (%d+) failed; the journal holds "
            .. "(%d+) events for (%d+) answered asks")
        assert.is_truthy(ok, out)
        assert.are.equal("0", failed)
        assert.are.equal(answered, events)
        -- its PostgreSQL is gone with it
        local dir = err:match("PostgreSQL on 127%.0%.0%.1:%d+, folder (%S+)")
        assert.is_truthy(dir, err)
        assert.is_false(exists(dir))
    end)

    it("persist refuses bad options", function()
        for _, argv in ipairs({ { "--seconds", "0" }, { "--seconds", "0.5" },
                                { "--ids", "0" }, { "--nope" } }) do
            local code = helpers.run({ bench, "persist", unpack(argv) })
            assert.are.equal(2, code)
        end
    end)
end)

describe("the installed product", function()
    local prefix

    setup(function()
        prefix = helpers.tmpdir() .. "/prefix"
        must({ "cmake", "--install", build, "--prefix", prefix }, 120)
    end)

    teardown(function()
        helpers.cleanup()
    end)

    it("holds no moonshard-bench", function()
        assert.is_true(exists(prefix .. "/bin/moonshard"))
        local found = must({ "find", prefix, "-name", "*bench*" })
        assert.are.equal("", found)
    end)

    it("has no bench code in the moonshard binary", function()
        local syms = must({ "nm", prefix .. "/bin/moonshard" })
        -- not vacuous: the node's own symbols are there
        assert.is_truthy(syms:find("ms_node_new", 1, true))
        assert.is_nil(syms:lower():find("bench", 1, true))
    end)

    it("`moonshard bench` points to moonshard-bench and exits 2", function()
        local code, out, err = helpers.run({ prefix .. "/bin/moonshard",
                                             "bench", "local" })
        assert.are.equal(2, code)
        assert.are.equal("", out)
        assert.is_truthy(err:find("moonshard-bench local", 1, true), err)
    end)
end)

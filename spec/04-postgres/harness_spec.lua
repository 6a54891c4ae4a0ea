-- spec/04-postgres/harness_spec.lua: the throwaway PostgreSQL of
-- spec/helpers/pg.lua (issue 11): it starts, answers on 127.0.0.1 with the
-- password it gives, stops and starts again, and once stopped leaves no
-- process and no folder behind. Without PostgreSQL these specs fail.

local pg = require "helpers.pg"

local function exists(path)
    local ok = os.execute("test -e '" .. path .. "'")
    return ok == true or ok == 0
end

describe("the throwaway PostgreSQL", function()
    teardown(function() pg.stop_all() end)

    it("starts, answers with its password, and leaves nothing once stopped", function()
        local srv = pg.start()
        assert.truthy(srv.conninfo:find("host=127.0.0.1", 1, true))
        assert.truthy(srv.conninfo:find("port=" .. srv.port, 1, true))
        assert.truthy(pg.alive(srv.pid))
        local rows, err = pg.psql(srv,
            "SELECT current_database(), current_user")
        assert.are.same({ "moonshard_test|ms" }, rows, err)
        local kids = pg.children(srv.pid)
        assert.is_true(#kids > 0) -- its checkpointer, writer, ...
        -- the socket lives in the folder; the server listens on 127.0.0.1
        rows = pg.psql(srv, "SHOW listen_addresses")
        assert.are.same({ "127.0.0.1" }, rows)
        -- the password it gives is needed: a wrong one is refused
        local bad = { conninfo = srv.conninfo:gsub("password=%S+",
            "password=wrong-pw-0b7e") }
        rows, err = pg.psql(bad, "SELECT 1")
        assert.is_nil(rows)
        assert.truthy(err:find("password authentication failed", 1, true))
        local dir, pid = srv.dir, srv.pid
        srv:stop()
        assert.falsy(pg.alive(pid))
        for _, k in ipairs(kids) do assert.falsy(pg.alive(k)) end
        assert.falsy(exists(dir))
    end)

    it("stops and starts again on the same port with its data", function()
        local srv = pg.start()
        assert.truthy(pg.psql(srv, "CREATE TABLE t (v int); "
            .. "INSERT INTO t VALUES (7)"))
        local first = srv.pid
        srv:pause()
        assert.falsy(pg.alive(first))
        assert.is_nil(pg.psql(srv, "SELECT 1"))
        srv:resume()
        assert.truthy(pg.alive(srv.pid))
        assert.are.same({ "7" }, pg.psql(srv, "SELECT v FROM t"))
        local dir, pid = srv.dir, srv.pid
        srv:stop()
        assert.falsy(pg.alive(pid))
        assert.falsy(exists(dir))
    end)

    it("runs two servers side by side on their own ports", function()
        local a, b = pg.start(), pg.start()
        assert.are_not.equal(a.port, b.port)
        assert.are_not.equal(a.dir, b.dir)
        assert.truthy(pg.psql(a, "CREATE TABLE only_a (v int)"))
        assert.are.same({ "0" }, pg.psql(b,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_a'"))
        local pids = { a.pid, b.pid }
        pg.stop_all()
        for _, p in ipairs(pids) do assert.falsy(pg.alive(p)) end
    end)

    it("is stopped by its guard once its owner is gone", function()
        local f = io.popen("sleep 300 >/dev/null 2>&1 & echo $!")
        local owner = tonumber(f:read("*a"))
        f:close()
        local srv = pg.start(owner)
        local dir, pid = srv.dir, srv.pid
        assert.truthy(pg.psql(srv, "SELECT 1"))
        os.execute("kill " .. owner)
        -- the guard looks once a second; give it 20
        local gone = false
        for _ = 1, 200 do
            if not pg.alive(pid) and not exists(dir) then gone = true; break end
            os.execute("sleep 0.1")
        end
        assert.is_true(gone)
        srv.dir = nil -- nothing left for stop_all
    end)

    -- with a second address the postmaster starts once it can bind any
    -- one of them; a port whose 127.0.0.1 another socket holds must not
    -- be taken (nemesis's heal_spec once got a server whose createdb
    -- reached nothing)
    it("takes another port when 127.0.0.1's is held, with a second address", function()
        local a = pg.start()
        local b = pg.start(nil, { listen = "127.0.0.2", allow = "127.0.0.0/8",
                                  ports = { a.port } })
        assert.are_not.equal(a.port, b.port)
        local rows, err = pg.psql(b, "SHOW listen_addresses")
        assert.are.same({ "127.0.0.1,127.0.0.2" }, rows, err)
        rows, err = pg.psql(b, "SELECT current_database()")
        assert.are.same({ "moonshard_test" }, rows, err)
        -- a port nobody holds is taken as given
        local free = b.port
        b:stop()
        local c = pg.start(nil, { listen = "127.0.0.2", allow = "127.0.0.0/8",
                                  ports = { free } })
        assert.are.equal(free, c.port)
        c:stop()
        a:stop()
    end)

    -- resume keeps its port: with a second address, one whose 127.0.0.1
    -- another socket took while the server was paused fails (it would run
    -- on the second address alone, and 127.0.0.1 reach the other one)
    it("fails a resume that cannot bind 127.0.0.1, with a second address", function()
        local b = pg.start(nil, { listen = "127.0.0.2", allow = "127.0.0.0/8" })
        b:pause()
        local a = pg.start(nil, { ports = { b.port } })
        assert.are.equal(b.port, a.port)
        local ok, err = pcall(b.resume, b)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("resume failed", 1, true))
        -- its server is not left running on 127.0.0.2
        assert.is_nil(pg.psql({ conninfo = b.conninfo:gsub("host=127.0.0.1",
                                                          "host=127.0.0.2") },
                              "SELECT 1"))
        -- and it resumes once the port is free again
        a:stop()
        b:resume()
        local rows, rerr = pg.psql(b, "SELECT current_database()")
        assert.are.same({ "moonshard_test" }, rows, rerr)
        b:stop()
    end)

    it("refuses a port list that is not ports", function()
        local ok, err = pcall(pg.start, nil, { ports = { "x" } })
        assert.is_false(ok)
        assert.truthy(tostring(err):find("opts.ports", 1, true))
    end)

    it("fails clearly when no server can start", function()
        local saved = pg.script
        pg.script = "/nonexistent/pg_server.sh"
        local ok, err = pcall(pg.start)
        pg.script = saved
        assert.is_false(ok)
        assert.truthy(tostring(err):find("cannot start a throwaway PostgreSQL",
            1, true))
    end)
end)

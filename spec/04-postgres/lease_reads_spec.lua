-- spec/04-postgres/lease_reads_spec.lua: GET /v1/leases/{type} is open
-- (no token) and reads on the node's pool, which the lease renewals
-- share; the node runs at most MS_NODE_LEASE_READS_MAX (2) such reads at
-- once and answers 503 `busy` past them, so readers cannot queue
-- SELECTs ahead of the renewals. The reads are held by a lock on
-- moonshard_leases taken from psql (the SELECT waits for it).

local helpers = require "helpers.node"
local pg = require "helpers.pg"

local format = string.format

describe("GET /v1/leases/{type} reads", function()
    local srv

    setup(function() srv = pg.start() end)

    teardown(function()
        helpers.stop_all_checked()
        pg.stop_all()
        assert.same({}, helpers.leaks())
    end)

    it("run at most two at once; a third is answered 503 busy at once",
       function()
        local db = "lease_reads"
        local c = helpers.cluster({
            size = 1,
            entities = { Seq = { module = "seq", shard_count = 4,
                                 persistence = "state", lease_duration = 20,
                                 lease_renew_interval = 5 } },
            settings = { database = pg.database(srv, db) },
        })
        c:start()
        c:wait_converged()
        local n1 = c:node("n1")
        pg.wait_migrated(n1, 30)
        assert.are.equal(200, (n1:http("GET", "/v1/leases/Seq")))

        local dir = os.tmpname()
        os.remove(dir)
        assert(os.execute("mkdir " .. dir))
        local conninfo = (srv.conninfo:gsub("dbname=%S+", "dbname=" .. db))
        -- the lock, held 3 s (below the pool's 5 s statement_timeout)
        os.execute(format("psql '%s' -XtA -c 'BEGIN; LOCK TABLE "
            .. "moonshard_leases IN ACCESS EXCLUSIVE MODE; "
            .. "SELECT pg_sleep(3); COMMIT;' >/dev/null 2>&1 &", conninfo))
        os.execute("sleep 0.5")
        for i = 1, 3 do
            os.execute(format("curl -s -m 10 -o %s/body%d -w '%%{http_code}'"
                .. " http://127.0.0.1:%d/v1/leases/Seq > %s/code%d &",
                dir, i, n1.port, dir, i))
        end
        os.execute("sleep 6")
        local codes, busy = {}, 0
        for i = 1, 3 do
            local f = assert(io.open(format("%s/code%d", dir, i)))
            local code = f:read("*a")
            f:close()
            f = assert(io.open(format("%s/body%d", dir, i)))
            local body = f:read("*a")
            f:close()
            codes[#codes + 1] = code
            if code == "503" and body:find('"code":"busy"', 1, true) then
                busy = busy + 1
            end
        end
        os.execute("rm -rf " .. dir)
        table.sort(codes)
        assert.same({ "200", "200", "503" }, codes)
        assert.are.equal(1, busy)
        -- the reads ended: the count went back down
        assert.are.equal(200, (n1:http("GET", "/v1/leases/Seq")))
        assert.are.equal(200, (n1:http("GET", "/v1/leases/Seq")))
    end)
end)

-- GET /metrics on a real node: the Prometheus text a scraper reads, with
-- the same numbers as GET /v1/stats, every one of them described.

local helpers = require "helpers.node"
local prom = require "helpers.prom"

describe("GET /metrics", function()
    local n

    setup(function()
        n = helpers.start({
            entities = { Counter = { module = "counter", shard_count = 8 } },
        })
    end)

    teardown(function()
        helpers.stop_all_checked()
    end)

    -- The whole response of GET `path`: status, head, body.
    local function get(path)
        local res = helpers.tcp_exchange(n.port, helpers.format_request(
            n.port, "GET", path, nil, true), 5)
        local head, body = res:match("^(.-\r\n)\r\n(.*)$")
        return tonumber(res:match("^HTTP/1%.1 (%d+)")), head, body
    end

    it("answers the stats in the text format, all of them typed", function()
        for i = 1, 20 do
            assert.equal(202, (n:tell("Counter", "m" .. i,
                                      { type = "incr" })))
        end
        local s = n:settle(20)
        local status, head, body = get("/metrics")
        assert.equal(200, status)
        assert.matches("\r\nContent%-Type: text/plain; version=0%.0%.4",
                       head)
        local fams = prom.parse(body)
        local seen = 0
        for name, f in pairs(fams) do
            assert.is_not.equal("untyped", f.kind,
                                name .. " has no description")
            assert.is_string(f.help)
            seen = seen + 1
        end
        assert.is_true(seen > 30, "only " .. seen .. " families")
        -- a quiet single node: the numbers are the ones /v1/stats shows
        assert.equal(s.delivered, fams.moonshard_delivered_total
                                      .samples[1].value)
        assert.equal(20, fams.moonshard_active_entities.samples[1].value)
        assert.equal(s.activations,
                     fams.moonshard_activations_total.samples[1].value)
        assert.equal(s.owned_shards, fams.moonshard_owned_shards
                                         .samples[1].value)
        assert.equal(s.moves.started, fams.moonshard_moves_started_total
                                          .samples[1].value)
        local info = fams.moonshard_build_info.samples[1].labels
        assert.equal(s.node, info.node)
        assert.equal(s.version, info.version)
    end)

    it("takes only GET", function()
        local status, body = n:http("POST", "/metrics", {})
        assert.equal(405, status)
        assert.is_table(body.error)
    end)

    it("is listed on the index page", function()
        local status, _, body = get("/")
        assert.equal(200, status)
        assert.matches("/metrics", body, 1, true)
    end)
end)

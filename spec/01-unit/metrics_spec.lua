-- moonshard.metrics: a node's stats JSON as Prometheus text (GET /metrics).

local metrics = require "moonshard.metrics"
local prom = require "helpers.prom"
local cjson = require "cjson"

-- Stats as a node writes them, every field distinct so a mix-up shows.
local function stats()
    local s = { node = "n1", cluster = "demo", version = "0.1.0",
                moves = {}, leases = { epochs = { { type = "T", shard = 0,
                                                    epoch = 3 } } },
                remember = { types = {} }, handoffs = {} }
    local i = 0
    for field in pairs(metrics.FIELDS) do
        i = i + 1
        local obj, key = field:match("^(moves)_(.+)$")
        if not obj then
            obj, key = field:match("^(leases)_(.+)$")
        end
        if not obj then
            obj, key = field:match("^(remember)_(.+)$")
        end
        if obj then
            s[obj][key] = 1000 + i
        else
            s[field] = 1000 + i
        end
    end
    return s
end

describe("moonshard.metrics", function()
    it("exports every stats number once, counters with _total", function()
        local s = stats()
        local fams = prom.parse(assert(metrics.render(cjson.encode(s))))
        for field, f in pairs(metrics.FIELDS) do
            local obj, key = field:match("^(%l+)_(.+)$")
            local want = s[field]
            if obj == "moves" or obj == "leases" or obj == "remember" then
                want = s[obj][key]
            end
            local name = "moonshard_" .. field
                         .. (f[1] == "counter" and "_total" or "")
            local fam = fams[name]
            assert.is_table(fam, name)
            assert.equal(f[1], fam.kind)
            assert.equal(f[2], fam.help)
            assert.equal(1, #fam.samples)
            assert.equal(want, fam.samples[1].value, name)
            assert.same({}, fam.samples[1].labels)
        end
        assert.same({ cluster = "demo", node = "n1", version = "0.1.0" },
                    fams.moonshard_build_info.samples[1].labels)
        assert.equal(1, fams.moonshard_build_info.samples[1].value)
    end)

    it("exports the persistence object as moonshard_persist_*", function()
        local s = { node = "n1", cluster = "demo", version = "0.1.0",
                    persistence = { commits = 3, events_written = 7,
                                    commit_latency_p99_us = 250 } }
        local fams = prom.parse(assert(metrics.render(cjson.encode(s))))
        assert.equal(3, fams.moonshard_persist_commits_total.samples[1].value)
        assert.equal(7, fams.moonshard_persist_events_written_total
                            .samples[1].value)
        assert.equal("gauge", fams.moonshard_persist_commit_latency_p99_us.kind)
        assert.is_nil(fams.moonshard_persistence_commits)
    end)

    it("is the same text whatever the order of the JSON", function()
        local s = stats()
        local a = metrics.render(cjson.encode(s))
        local keys = {}
        for k in pairs(s) do keys[#keys + 1] = k end
        table.sort(keys, function(x, y) return x > y end)
        local parts = {}
        for _, k in ipairs(keys) do
            parts[#parts + 1] = cjson.encode(k) .. ":" .. cjson.encode(s[k])
        end
        assert.equal(a, metrics.render("{" .. table.concat(parts, ",") .. "}"))
    end)

    it("labels each move under way, escaping the label values", function()
        local s = stats()
        s.handoffs = {
            { type = "Counter", shard = 3, state = "buffering",
              from = "00000000000000a1", buffered = 12, for_ms = 1500 },
            { type = "We\"ird\\Ty\npe", shard = 0, state = "stopping",
              from = "00000000000000b2", buffered = 0, for_ms = 20 },
        }
        local text = metrics.render(cjson.encode(s))
        assert.matches('type="We\\"ird\\\\Ty\\npe"', text, 1, true)
        local fams = prom.parse(text)
        local w = fams.moonshard_handoff_waiting_messages.samples
        assert.equal(2, #w)
        assert.same({ type = "Counter", shard = "3", state = "buffering",
                      from = "00000000000000a1" }, w[1].labels)
        assert.equal(12, w[1].value)
        assert.equal("We\"ird\\Ty\npe", w[2].labels.type)
        local age = fams.moonshard_handoff_seconds.samples
        assert.equal(1.5, age[1].value)
        assert.equal(0.02, age[2].value)
    end)

    it("declares the handoff families also when nothing moves", function()
        local fams = prom.parse(metrics.render(cjson.encode(stats())))
        assert.equal("gauge", fams.moonshard_handoff_waiting_messages.kind)
        assert.equal(0, #fams.moonshard_handoff_waiting_messages.samples)
    end)

    it("exports a field it has no description of as untyped", function()
        local s = stats()
        s.brand_new = 7
        s.moves.later = 8
        local fams = prom.parse(metrics.render(cjson.encode(s)))
        assert.equal("untyped", fams.moonshard_brand_new.kind)
        assert.equal(7, fams.moonshard_brand_new.samples[1].value)
        assert.equal(8, fams.moonshard_moves_later.samples[1].value)
    end)

    it("writes large counters as integers", function()
        local s = stats()
        s.delivered = 2 ^ 40 + 1
        local fams = prom.parse(metrics.render(cjson.encode(s)))
        assert.equal(2 ^ 40 + 1, fams.moonshard_delivered_total.samples[1].value)
        assert.not_matches("e%+", metrics.render(cjson.encode(s)))
    end)

    -- The "remember" object as the node writes it (issue 12).
    local REMEMBER = [[{"queue_max":10000,"queued":4,"inflight":2,
      "recorded":130,"coalesced":5,"cancelled":1,"drops":0,"abandoned":0,
      "resyncs":0,"writes":40,"written":124,"errors":3,"retries":3,
      "stale_answers":0,"failed_shards":2,"eager_starts":15,
      "eager_pending":7,"eager_dropped":0,"eager_skipped":0,
      "eager_failed":0,"loads":4,"load_errors":1,"early_drops":0,"unstorable":0,
      "types":{"Order":{"store":"file","remembered":15,"failed":[7,3],
                        "shards":{"0":12,"5":3}},
               "Sess\"ion":{"store":"memory","remembered":0,"failed":[],
                        "shards":{}}}}]]

    local function with_remember(remember_json)
        return '{"node":"n1","cluster":"demo","version":"0.1.0",'
            .. '"remember":' .. remember_json .. '}'
    end

    it("exports the remember object: scalars, types and shards", function()
        local fams = prom.parse(assert(metrics.render(
            with_remember(REMEMBER))))
        assert.equal("gauge", fams.moonshard_remember_queue_max.kind)
        assert.equal(10000, fams.moonshard_remember_queue_max.samples[1].value)
        assert.equal(4, fams.moonshard_remember_queued.samples[1].value)
        assert.equal(2, fams.moonshard_remember_inflight.samples[1].value)
        assert.equal(3, fams.moonshard_remember_errors_total.samples[1].value)
        assert.equal(2, fams.moonshard_remember_failed_shards
                            .samples[1].value)
        assert.equal(15, fams.moonshard_remember_eager_starts_total
                             .samples[1].value)
        assert.equal("gauge", fams.moonshard_remember_eager_pending.kind)
        assert.equal(1, fams.moonshard_remember_load_errors_total
                            .samples[1].value)
        local function series(name)
            local t = {}
            for _, smp in ipairs(fams[name].samples) do
                t[#t + 1] = { smp.labels, smp.value }
            end
            return t
        end
        assert.equal("gauge", fams.moonshard_remember_entities.kind)
        assert.same({ { { type = "Order" }, 15 },
                      { { type = "Sess\"ion" }, 0 } },
                    series("moonshard_remember_entities"))
        assert.same({ { { type = "Order", shard = "0" }, 12 },
                      { { type = "Order", shard = "5" }, 3 } },
                    series("moonshard_remember_shard_entities"))
        assert.same({ { { type = "Order", shard = "3" }, 1 },
                      { { type = "Order", shard = "7" }, 1 } },
                    series("moonshard_remember_shard_failed"))
        -- the types object itself gives nothing else
        for name in pairs(fams) do
            assert.falsy(name:find("types", 1, true), name)
            assert.falsy(name:find("Order", 1, true), name)
        end
    end)

    it("leaves out remember types and shards of the wrong shape", function()
        local text = assert(metrics.render(with_remember([[{"queued":0,
          "types":{"A":{"remembered":"many","failed":{"x":1},
                        "shards":{"x":1,"-1":2,"1.5":3,"2":"n","3":4,
                                  "99999999999":5}},
                   "B":7,
                   "C":{"remembered":1,"failed":[1,1,-2,"4",0.5,"z",2],
                        "shards":[5]}}}]])))
        local fams = prom.parse(text)
        local names = {}
        for name in pairs(fams) do
            if name:find("^moonshard_remember_") then
                names[#names + 1] = name
            end
        end
        table.sort(names)
        assert.same({ "moonshard_remember_entities",
                      "moonshard_remember_queued",
                      "moonshard_remember_shard_entities",
                      "moonshard_remember_shard_failed" }, names)
        local function flat(name)
            local t = {}
            for _, smp in ipairs(fams[name].samples) do
                t[#t + 1] = (smp.labels.type or "") .. "/"
                    .. (smp.labels.shard or "") .. "=" .. smp.value
            end
            return t
        end
        assert.same({ "C/=1" }, flat("moonshard_remember_entities"))
        assert.same({ "A/3=4" }, flat("moonshard_remember_shard_entities"))
        assert.same({ "C/1=1", "C/2=1" },
                    flat("moonshard_remember_shard_failed"))
    end)

    it("has no remember series without the remember object", function()
        local fams = prom.parse(assert(metrics.render(
            '{"node":"n1","cluster":"demo","version":"0.1.0","routed":1}')))
        for name in pairs(fams) do
            assert.falsy(name:find("remember", 1, true), name)
        end
        fams = prom.parse(assert(metrics.render(with_remember('"junk"'))))
        for name in pairs(fams) do
            assert.falsy(name:find("remember", 1, true), name)
        end
    end)

    it("refuses what is not a stats object", function()
        local text, err = metrics.render("[1,2")
        assert.is_nil(text)
        assert.matches("^bad stats", err)
        text, err = metrics.render("3")
        assert.is_nil(text)
        assert.matches("not an object", err)
    end)
end)

describe("the spec's exposition reader", function()
    it("refuses what a scraper would refuse", function()
        local bad = {
            "x 1",                                     -- no newline at end
            "# TYPE a counter\nb 1\n",                 -- outside its family
            "# TYPE a counter\n# TYPE a gauge\na 1\n", -- second TYPE
            "# TYPE a counter\na 1\n# HELP a late\n",  -- HELP after samples
            "# TYPE a counter\na{x=\"1} 2\n",          -- unterminated value
            "# TYPE a counter\na{x=\"\\q\"} 2\n",      -- bad escape
            "# TYPE a counter\na one\n",               -- not a number
            "# TYPE 1a counter\n1a 1\n",               -- bad name
            "# TYPE a sometimes\na 1\n",               -- bad type
        }
        for _, text in ipairs(bad) do
            assert.has_error(function() prom.parse(text) end, nil, text)
        end
        assert.has_no.errors(function()
            prom.parse("# HELP a b\n# TYPE a gauge\na{x=\"\\\"\"} 1\n")
        end)
    end)
end)

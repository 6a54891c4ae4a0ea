// ui/app.js -- fills the status page (ui/index.html) from the JSON
// endpoints of the node that served it, the same ones the CLI reads:
//   GET /v1/members            members, leader, coordinator (uids)
//   GET /v1/stats              counters, "handoffs" (moving shards with
//                              state and age), "leases" (epochs of the
//                              leases this node holds), "entity_types"
//   GET /v1/allocations/{type} one owner per shard, with its generation
//   GET /v1/leases/{type}      a leased type's lease rows in the database
//                              (holder and epoch of EVERY shard), read
//                              every LEASES_MS while the node's database
//                              is connected; without them (no answer,
//                              an error) the map falls back to the
//                              epochs of this node's own leases
// Every POLL_MS it fetches them again and redraws; the counters keep the
// last HISTORY samples for the sparklines. When the node does not answer,
// a banner says so, the last data stays (dimmed) and polling goes on.
// Plain ES2017, no library, no build step.
"use strict";

(function () {
    const POLL_MS = 1000;
    const HISTORY = 60;          // samples kept per counter (a minute)
    const FETCH_TIMEOUT_MS = 2500;
    const LEASES_MS = 2000;       // lease rows read at most this often
    const LEASES_RETRY_MS = 10000; // and after a failure, this much later

    // Owner colours: by the member's place among the current members'
    // names, sorted, recomputed on each refresh, so every node's page that
    // sees the same members colours each the same way, whenever it was
    // opened (a colour kept from the order names were first seen differed
    // between a page open during a join and one opened after it). A
    // member's colour can change when another joins or goes; an owner
    // that is no member any more is grey.
    const PALETTE = ["#3b5bdb", "#e8590c", "#2b8a3e", "#ae3ec9", "#1098ad",
                     "#f08c00", "#c2255c", "#5c940d", "#7048e8", "#495057"];

    // The counters drawn as sparklines: rates of the stats' counters per
    // second, or gauges as they are.
    const COUNTERS = [
        { key: "throughput", label: "throughput", unit: "msg/s",
          rate: s => s.delivered },
        { key: "errors", label: "handler errors", unit: "/s", bad: true,
          rate: s => s.handler_errors },
        { key: "ask_timeouts", label: "asks timing out", unit: "/s",
          bad: true, rate: s => s.asks_timed_out },
        { key: "buffered", label: "buffered (moving shards)", unit: "msg",
          gauge: s => (s.handoffs || []).reduce((a, h) => a + h.buffered,
                                                0) },
        { key: "pending", label: "pending in mailboxes", unit: "msg",
          gauge: s => s.pending },
        { key: "overflows", label: "overflows", unit: "/s", bad: true,
          rate: s => s.overflows + (s.route_overflows || 0)
                     + (s.handoff_overflows || 0) },
    ];

    const history = {};           // counter key -> [values]
    let lastStats = null, lastAt = 0;
    const colours = {};           // member name -> colour
    let failures = 0;
    // type name -> { at, rows: {shard: row} | null, failed }: the last
    // answer of /v1/leases/{type}, kept between reads
    const leaseRows = {};

    const $ = sel => document.querySelector(sel);

    function el(tag, cls, text) {
        const e = document.createElement(tag);
        if (cls) e.className = cls;
        if (text !== undefined) e.textContent = String(text);
        return e;
    }

    async function getJSON(path) {
        const ctl = new AbortController();
        const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
        try {
            const r = await fetch(path, { cache: "no-store",
                                          signal: ctl.signal });
            if (!r.ok) throw new Error(path + ": HTTP " + r.status);
            return await r.json();
        } finally {
            clearTimeout(timer);
        }
    }

    function colourOf(name) {
        return colours[name] || "#868e96";
    }

    function assignColours(members) {
        const names = members.map(m => m.name).sort();
        for (const n of Object.keys(colours)) delete colours[n];
        names.forEach((n, i) => { colours[n] = PALETTE[i % PALETTE.length]; });
    }

    function age(ms) {
        if (ms < 1000) return ms + " ms";
        if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
        return Math.floor(ms / 60000) + " min " +
               Math.floor((ms % 60000) / 1000) + " s";
    }

    // A plan generation: its high 32 bits are the coordinator term that
    // issued it (runtime/core/plan.h), the low ones count within it.
    function gen(g) {
        if (typeof g !== "number") return String(g);
        const term = Math.floor(g / 4294967296);
        return (g - term * 4294967296) + " of term " + term;
    }

    function fmt(v) {
        if (v === null || v === undefined || Number.isNaN(v)) return "–";
        if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
        if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + "k";
        return Number.isInteger(v) ? String(v) : v.toFixed(1);
    }

    // ---- members ---------------------------------------------------------

    function drawMembers(view, stats) {
        const tbody = $("#members tbody");
        tbody.replaceChildren();
        const byUid = {};
        for (const m of view.members) {
            byUid[m.uid] = m;
            const tr = el("tr");
            tr.dataset.name = m.name;
            tr.dataset.status = m.status;
            const sw = el("span", "swatch");
            sw.style.setProperty("background", colourOf(m.name));
            const c0 = el("td"); c0.append(sw);
            tr.append(c0, el("td", "name", m.name), el("td", "", m.address));
            tr.append(el("td", "status-" + m.status, m.status));
            tr.append(el("td", m.reachable ? "" : "unreachable",
                         m.reachable ? "yes" : "UNREACHABLE"));
            tr.append(el("td", "", (m.roles || []).join(", ") || "–"));
            tr.append(el("td", "", m.version), el("td", "", m.weight),
                      el("td", "", m.up_number));
            const tags = el("td");
            if (m.uid === view.coordinator)
                tags.append(el("span", "tag coordinator", "coordinator"));
            if (m.uid === view.leader) tags.append(el("span", "tag", "leader"));
            if (m.uid === view.self) tags.append(el("span", "tag self",
                                                    "this node"));
            tr.append(tags);
            tbody.append(tr);
        }
        const coord = byUid[view.coordinator];
        $("#members-note").textContent =
            view.members.length + " members · coordinator " +
            (coord ? coord.name : "none") + " · " +
            (view.converged ? "converged" : "not converged") +
            (stats ? " · cluster " + stats.cluster : "");
        return byUid;
    }

    // ---- counters --------------------------------------------------------

    function sample(stats, now) {
        const dt = lastStats ? (now - lastAt) / 1000 : 0;
        for (const c of COUNTERS) {
            let v;
            if (c.gauge) v = c.gauge(stats);
            else if (lastStats && dt > 0)
                v = Math.max(0, (c.rate(stats) - c.rate(lastStats)) / dt);
            else continue;
            const h = history[c.key] || (history[c.key] = []);
            h.push(v);
            if (h.length > HISTORY) h.shift();
        }
        lastStats = stats;
        lastAt = now;
    }

    function sparkline(canvas, values, colour) {
        const dpr = window.devicePixelRatio || 1;
        const w = canvas.clientWidth || 140, h = canvas.clientHeight || 36;
        if (canvas.width !== w * dpr) {
            canvas.width = w * dpr;
            canvas.height = h * dpr;
        }
        const g = canvas.getContext("2d");
        g.setTransform(dpr, 0, 0, dpr, 0, 0);
        g.clearRect(0, 0, w, h);
        g.strokeStyle = "#dfe3e8";
        g.beginPath(); g.moveTo(0, h - 0.5); g.lineTo(w, h - 0.5); g.stroke();
        if (values.length < 2) return;
        const max = Math.max(1, ...values);
        const step = w / (HISTORY - 1);
        const x0 = w - (values.length - 1) * step;
        g.beginPath();
        values.forEach((v, i) => {
            const x = x0 + i * step, y = h - 2 - (v / max) * (h - 6);
            if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
        });
        g.strokeStyle = colour;
        g.lineWidth = 1.5;
        g.stroke();
        g.lineTo(w, h); g.lineTo(x0, h); g.closePath();
        g.globalAlpha = 0.12; g.fillStyle = colour; g.fill();
        g.globalAlpha = 1;
    }

    function drawCounters() {
        const box = $("#counters");
        if (!box.childElementCount) {
            for (const c of COUNTERS) {
                const card = el("div", "card");
                card.dataset.counter = c.key;
                card.append(el("div", "label", c.label));
                const v = el("div", "value");
                v.append(el("span", "number", "–"),
                         el("span", "unit", c.unit));
                card.append(v, el("canvas"));
                box.append(card);
            }
        }
        for (const c of COUNTERS) {
            const card = box.querySelector('[data-counter="' + c.key + '"]');
            const h = history[c.key] || [];
            const last = h.length ? h[h.length - 1] : null;
            card.querySelector(".number").textContent = fmt(last);
            card.dataset.peak = h.length ? Math.max(...h) : 0;
            const colour = c.bad && last > 0 ? "#c92a2a" : "#3b5bdb";
            sparkline(card.querySelector("canvas"), h, colour);
        }
    }

    // ---- moves -----------------------------------------------------------

    function drawMoves(stats, byUid) {
        const tbody = $("#moves tbody");
        tbody.replaceChildren();
        const moves = stats.handoffs || [];
        for (const m of moves) {
            const tr = el("tr");
            tr.dataset.type = m.type;
            tr.dataset.shard = m.shard;
            const from = byUid[m.from] ? byUid[m.from].name : m.from;
            tr.append(el("td", "", m.type), el("td", "", m.shard),
                      el("td", "", from), el("td", "", m.state),
                      el("td", "", m.buffered), el("td", "", age(m.for_ms)));
            tbody.append(tr);
        }
        $("#moves").hidden = moves.length === 0;
        $("#moves-empty").hidden = moves.length !== 0;
        const mv = stats.moves || {};
        $("#moves-note").textContent = "· as coordinator: " +
            (mv.started || 0) + " started, " + (mv.finished || 0) +
            " done, " + (mv.aborted || 0) + " aborted";
    }

    // ---- shard maps ------------------------------------------------------

    function drawLegend(view) {
        const box = $("#legend");
        box.replaceChildren();
        for (const m of view.members) {
            const item = el("span", "item");
            const sw = el("span", "swatch");
            sw.style.setProperty("background", colourOf(m.name));
            item.append(sw, " " + m.name);
            box.append(item);
        }
        const un = el("span", "item");
        const sw = el("span", "swatch unowned");
        un.append(sw, " no owner yet");
        box.append(un);
        const mv = el("span", "item muted", "dashed, pulsing: moving");
        box.append(mv);
    }

    // One cell's content and attributes; `key` is what they are drawn
    // from, kept on the cell so an unchanged shard is not touched again.
    // `e` is this node's epoch of the shard (stats), `row` the database's
    // lease row ({holder, epoch, held, expires_in_ms}) when it was read.
    function drawCell(c, key, type, s, mv, e, row, selfName) {
        c.replaceChildren(el("span", "", s.shard));
        c.className = "cell";
        c.style.removeProperty("background");
        delete c.dataset.epoch;
        delete c.dataset.holder;
        delete c.dataset.lease;
        let tip = type.name + " shard " + s.shard + "\n";
        if (s.owner === null) {
            c.classList.add("unowned");
            c.dataset.owner = "";
            tip += "no owner yet (allocated on its first message)";
        } else {
            c.dataset.owner = s.owner;
            c.style.setProperty("background", colourOf(s.owner));
            tip += "owner " + s.owner + " (generation " +
                   gen(s.generation) + ")";
        }
        if (mv) {
            c.classList.add("moving");
            c.append(el("span", "arrow", "\u21c4"));
            tip += "\nmoving: " + mv.state + " for " + age(mv.for_ms) +
                   ", " + mv.buffered + " buffered";
        }
        if (type.leased && row) {
            c.dataset.epoch = row.epoch;
            c.dataset.holder = row.holder;
            c.dataset.lease = row.held ? "held" : "expired";
            c.append(el("span", "epoch" + (row.held ? "" : " expired"),
                        "e" + row.epoch));
            tip += row.held
                ? "\nlease held by " + row.holder + ", epoch " + row.epoch +
                  " (expires in " + age(Math.max(0, row.expires_in_ms)) + ")"
                : "\nlease of " + row.holder + ", epoch " + row.epoch +
                  ", expired " + age(Math.max(0, -row.expires_in_ms)) +
                  " ago";
        } else if (type.leased) {
            if (e !== undefined) {
                c.dataset.epoch = e;
                c.append(el("span", "epoch", "e" + e));
                tip += "\nlease held by " + selfName + ", epoch " + e;
            } else if (s.owner !== null) {
                tip += "\nlease held by its owner " + s.owner +
                       " (its epoch on " + s.owner + "'s page)";
            }
        }
        c.title = tip;
        c.dataset.shard = s.shard;
        c._key = key;
    }

    // The cells are made once per shard and kept: each refresh redraws
    // only the shards whose owner, generation, move or epoch changed, so
    // a type of 65536 shards (MS_PLAN_MAX_SHARDS) does not rebuild its
    // whole grid every second (that took seconds and froze the page).
    function drawMap(box, type, alloc, moving, epochs, rows, selfName) {
        let map = box.querySelector('.map[data-type="' + CSS.escape(type.name)
                                    + '"]');
        if (!map) {
            map = el("div", "map");
            map.dataset.type = type.name;
            map.append(el("h3"), el("div", "grid"));
            box.append(map);
        }
        const grid = map.querySelector(".grid");
        const shards = alloc.shards;
        if (grid.childElementCount !== shards.length) {
            const cells = document.createDocumentFragment();
            for (let i = 0; i < shards.length; i++) cells.append(el("div"));
            grid.replaceChildren(cells);
        }
        let owned = 0;
        let c = grid.firstElementChild;
        for (const s of shards) {
            const mv = moving[s.shard];
            const e = type.leased ? epochs[s.shard] : undefined;
            const row = type.leased && rows ? rows[s.shard] : undefined;
            if (s.owner !== null) owned++;
            // the time left is in the tooltip to the second only, so a
            // row redraws once a second, not on every read
            const key = s.shard + "|" + s.owner + "|" + s.generation + "|" +
                (mv ? mv.state + "|" + mv.for_ms + "|" + mv.buffered : "") +
                "|" + e + "|" + (row ? row.holder + "|" + row.epoch + "|" +
                                 row.held + "|" +
                                 Math.round(row.expires_in_ms / 1000) : "") +
                "|" + (s.owner !== null ? colourOf(s.owner) : "");
            if (c._key !== key)
                drawCell(c, key, type, s, mv, e, row, selfName);
            c = c.nextElementSibling;
        }
        map.querySelector("h3").textContent = type.name + " · " +
            alloc.shard_count + " shards · " + owned + " owned · " +
            Object.keys(moving).length + " moving · generation " +
            gen(alloc.generation) + (!type.leased ? ""
                : rows ? " · leased (holders and epochs from the database)"
                : " · leased (epochs of " + selfName + "'s leases shown)");
    }

    // The lease rows of a leased type, {shard: row}, or null when there
    // are none to show: the node's database is not connected, or the
    // last read failed (tried again LEASES_RETRY_MS later; the stats'
    // own epochs are shown meanwhile). Fetched only while the database
    // is connected, so a node without one is not asked for an answer it
    // can only refuse (the browser logs every refused fetch).
    async function leasesOf(type, stats) {
        const db = stats.database || {};
        const got = leaseRows[type.name];
        const now = Date.now();
        if (!db.connected) return null;
        if (got && now - got.at < (got.failed ? LEASES_RETRY_MS
                                                : LEASES_MS))
            return got.rows;
        try {
            const ans = await getJSON("/v1/leases/" +
                                      encodeURIComponent(type.name));
            const rows = {};
            for (const r of ans.leases || []) rows[r.shard] = r;
            leaseRows[type.name] = { at: now, rows: rows, failed: false };
            return rows;
        } catch (err) {
            leaseRows[type.name] = { at: now, rows: null, failed: true };
            return null;
        }
    }

    async function drawMaps(stats) {
        const types = stats.entity_types || [];
        const allocs = await Promise.all(types.map(t =>
            getJSON("/v1/allocations/" + encodeURIComponent(t.name))));
        const leases = await Promise.all(types.map(t =>
            t.leased ? leasesOf(t, stats) : null));
        const box = $("#maps");
        const keep = new Set(types.map(t => t.name));
        for (const m of box.querySelectorAll(".map"))
            if (!keep.has(m.dataset.type)) m.remove();
        types.forEach((t, i) => {
            const moving = {}, epochs = {};
            for (const h of stats.handoffs || [])
                if (h.type === t.name) moving[h.shard] = h;
            for (const e of (stats.leases && stats.leases.epochs) || [])
                if (e.type === t.name) epochs[e.shard] = e.epoch;
            drawMap(box, t, allocs[i], moving, epochs, leases[i],
                    stats.node);
        });
    }

    // ---- the loop --------------------------------------------------------

    function banner(text) {
        const b = $("#banner");
        b.hidden = !text;
        b.textContent = text || "";
        document.body.classList.toggle("stale", !!text);
    }

    async function poll() {
        const now = Date.now();
        try {
            const [view, stats] = await Promise.all([getJSON("/v1/members"),
                                                     getJSON("/v1/stats")]);
            assignColours(view.members);
            sample(stats, now);
            const byUid = drawMembers(view, stats);
            drawCounters();
            drawMoves(stats, byUid);
            drawLegend(view);
            await drawMaps(stats);
            $("#title").textContent = "cluster " + stats.cluster +
                                      " · node " + stats.node;
            document.title = "moonshard · " + stats.node;
            $("#updated").textContent = "updated " +
                new Date().toLocaleTimeString();
            failures = 0;
            banner(null);
            // how many refreshes drew the page (for tests and scripts)
            document.body.dataset.refreshes =
                (+document.body.dataset.refreshes || 0) + 1;
        } catch (err) {
            failures++;
            banner("Cannot reach this node (" + location.host + "): " +
                   (err && err.name === "AbortError" ? "no answer in " +
                    FETCH_TIMEOUT_MS / 1000 + " s" : String(err && err.message
                                                           || err)) +
                   ". Retrying every second" + (failures > 1 ? " (" +
                   failures + " failures in a row)" : "") + "; the data " +
                   "below is from the last answer.");
        } finally {
            setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - now)));
        }
    }

    poll();
})();

-- spec/04-install/install_spec.lua: a build users can install (issue 10,
-- point 6). From a copy of the source tree it configures a Release build
-- with -Werror, installs it into a temporary prefix and packs a .deb, then
-- removes both the build tree and the source copy, and runs the installed
-- binary from a fresh folder, without MOONSHARD_HOME: the node must find
-- its Lua library and the shipped `counter` behavior from its own location
-- (<prefix>/share/moonshard). Its own ctest (install), apart from the
-- integration layer: the build takes about a minute on two cores.

local helpers = require "helpers.node"

local format, find = string.format, string.find

local must, exists = helpers.must, helpers.exists

-- A 1-node config with the shipped counter, in a fresh folder.
local function write_config(listen, http)
    local path = helpers.tmpdir() .. "/cluster.lua"
    helpers.write_file(path, format([[
return {
    cluster = "install-spec",
    secret = "spec-secret-7f3a9c2e41b8",
    nodes = { { name = "n1", listen = "127.0.0.1:%d",
                http = "127.0.0.1:%d" } },
    entities = { Counter = { module = "counter" } },
}
]], listen, http))
    return path
end

-- A Lua library that only fails: where `moonshard shard --config` must
-- not look.
local function write_decoy(dir)
    must({ "mkdir", "-p", dir .. "/lua/moonshard" })
    helpers.write_file(dir .. "/lua/moonshard/host.lua",
                       "error('decoy library')\n")
    helpers.write_file(dir .. "/lua/moonshard/config.lua",
                       "error('decoy library')\n")
end

-- `BIN shard --config CONFIG --type Counter c1` from a fresh folder,
-- without MOONSHARD_HOME: loading the config needs the Lua library.
local function shard_with(bin, config)
    local code, out, err = helpers.run({ "env", "-u", "MOONSHARD_HOME",
        "-C", helpers.tmpdir(), bin, "shard", "--config", config, "--type",
        "Counter", "c1" })
    return { code = code, out = out, err = err }
end

describe("install", function()
    local root, prefix, deb_dir
    local from_build, from_install -- shard_with results, before the rm

    setup(function()
        root = helpers.tmpdir()
        local src, build = root .. "/src", root .. "/build"
        prefix, deb_dir = root .. "/prefix", root .. "/deb"
        -- a copy of what a clone holds, so that the source tree can go too
        must({ "mkdir", src })
        must({ "cp", "-R", helpers.home .. "/CMakeLists.txt",
               helpers.home .. "/runtime", helpers.home .. "/lua",
               helpers.home .. "/entities", helpers.home .. "/spec",
               helpers.home .. "/bench", helpers.home .. "/sim",
               helpers.home .. "/ui", src })
        -- Release with -Werror: the default flags of a standard build type
        -- build clean. Only the binary is built (the install and the
        -- package need nothing else).
        must({ "cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
               "-DMS_WERROR=ON", "-DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON" },
             120)
        must({ "cmake", "--build", build, "-j2", "--target", "moonshard" },
             900)
        must({ "cmake", "--install", build, "--prefix", prefix }, 120)
        must({ "cpack", "-G", "DEB", "-B", deb_dir, "--config",
               build .. "/CPackConfig.cmake" }, 300)
        -- Which library each binary picks while both trees exist: the
        -- build's binary its source tree, not an install beside its build
        -- folder (root/share/moonshard); the installed binary its share
        -- folder, not the source tree it was built from.
        local config = write_config(helpers.free_port(), helpers.free_port())
        write_decoy(root .. "/share/moonshard")
        from_build = shard_with(build .. "/moonshard", config)
        must({ "rm", "-rf", root .. "/share" })
        write_decoy(src)
        from_install = shard_with(prefix .. "/bin/moonshard", config)
        must({ "rm", "-rf", build, src })
    end)

    teardown(function()
        helpers.stop_all_checked()
        helpers.cleanup()
    end)

    it("puts the binary in bin/ and the Lua files in share/moonshard/",
       function()
        assert.is_true(exists(prefix .. "/bin/moonshard"))
        assert.is_true(exists(prefix
            .. "/share/moonshard/lua/moonshard/host.lua"))
        assert.is_true(exists(prefix
            .. "/share/moonshard/lua/moonshard/strategy/least_loaded.lua"))
        assert.is_true(exists(prefix .. "/share/moonshard/entities/counter.lua"))
        assert.is_true(exists(prefix .. "/share/moonshard/ui/index.html"))
        assert.is_true(exists(prefix .. "/share/moonshard/ui/app.js"))
        assert.is_true(exists(prefix
            .. "/lib/systemd/system/moonshard@.service"))
        assert.is_false(exists(root .. "/src"))
        assert.is_false(exists(root .. "/build"))
    end)

    it("a build's binary reads its source tree, an installed one its "
       .. "share folder", function()
        assert.are.equal(0, from_build.code, from_build.err)
        assert.is_truthy(from_build.out:match("%d"), from_build.out)
        assert.are.equal(0, from_install.code, from_install.err)
        assert.are.same(from_build.out, from_install.out)
    end)

    it("runs a node from another folder once the build tree is gone",
       function()
        local bin = prefix .. "/bin/moonshard"
        local cwd = helpers.tmpdir()
        local listen, http = helpers.free_port(), helpers.free_port()
        local config = write_config(listen, http)
        -- env(1) execs the node in place (same PID), in cwd, without
        -- MOONSHARD_HOME
        local log = cwd .. "/node.log"
        local proc = helpers.spawn({ "env", "-u", "MOONSHARD_HOME",
                                     "-C", cwd, bin, "node", config,
                                     "--name", "n1" },
                                   { stdout = log, stderr = "stdout" })
        helpers.wait_until(function()
            if proc:poll() then
                error("the installed node exited (code "
                      .. tostring(proc.code) .. "):\n"
                      .. (helpers.read_file(log) or ""))
            end
            return helpers.request(http, "GET", "/v1/health", nil,
                                   { max_time = 1 }) == 200
        end, 10, "the installed node's health")

        local path = helpers.entity_path("Counter", "c1", "ask")
        local status = helpers.request(http, "POST",
            helpers.entity_path("Counter", "c1", "tell"),
            { type = "incr", by = 5 })
        assert.are.equal(202, status)
        local body
        status, body = helpers.request(http, "POST", path, { type = "get" })
        assert.are.equal(200, status)
        assert.are.same({ value = 5 }, body)

        -- and serves the status page from its share folder
        local st, _, raw = helpers.request(http, "GET", "/ui")
        assert.are.equal(200, st)
        assert.is_truthy(find(raw, "ui/app.js", 1, true), raw)

        -- the installed CLI finds its Lua files too (status lays out its
        -- text with lua/moonshard/status.lua)
        local code, out, err = helpers.run({ "env", "-u", "MOONSHARD_HOME",
            "-C", cwd, bin, "status", "--node", "127.0.0.1:" .. http })
        assert.are.equal(0, code, err)
        assert.is_truthy(find(out, "n1", 1, true), out)

        proc:terminate(5)
        assert.are.equal(0, proc.code)
    end)

    it("packs a .deb with its dependencies, the binary, the library and "
       .. "the unit", function()
        local ls = must({ "ls", deb_dir })
        local name = ls:match("(moonshard_[%w.~+-]+_[%w]+%.deb)")
        assert.is_truthy(name, ls)
        local deb = deb_dir .. "/" .. name
        local info = must({ "dpkg-deb", "-I", deb })
        assert.is_truthy(info:find("Package: moonshard", 1, true), info)
        local depends = info:match("Depends: ([^\n]+)")
        assert.is_truthy(depends, info)
        for _, pkg in ipairs({ "libluajit2-5.1-2", "libuv1",
                               "libhttp-parser2.9", "libssl3",
                               "lua-cjson" }) do
            assert.is_truthy(depends:find(pkg, 1, true), pkg .. " in "
                             .. depends)
        end
        local files = must({ "dpkg-deb", "-c", deb })
        for _, f in ipairs({ "./usr/bin/moonshard",
                             "./usr/share/moonshard/lua/moonshard/host.lua",
                             "./usr/share/moonshard/entities/counter.lua",
                             "./usr/share/moonshard/ui/index.html",
                             "./usr/lib/systemd/system/moonshard@.service" })
        do
            assert.is_truthy(files:find(f, 1, true), f .. " in\n" .. files)
        end
        local tree = helpers.tmpdir()
        must({ "dpkg-deb", "-x", deb, tree })
        local unit = helpers.read_file(tree
            .. "/usr/lib/systemd/system/moonshard@.service")
        assert.is_truthy(unit)
        assert.is_truthy(unit:find("Restart=on-failure", 1, true))
        assert.is_truthy(unit:find(
            "ExecStart=/usr/bin/moonshard node /etc/moonshard/cluster.lua"
            .. " --name %i", 1, true))
    end)
end)

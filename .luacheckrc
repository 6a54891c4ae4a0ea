-- luacheck configuration: `luacheck lua entities spec` from the repo root.
std = "luajit"

-- Arguments named with a leading underscore are deliberately unused
-- (callbacks with a fixed signature).
ignore = { "212/_.*" }

files["spec"] = {
    std = "+busted",
}

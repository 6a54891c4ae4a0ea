local t = setmetatable({}, { __index = function(_, k) return k end })
local n = {}
for i = 1, 40 do n[i] = { name = ("n" .. i), listen = "127.0.0.1:" .. (7100 + i) } end
return {
    cluster = t, secret = ("x"):rep(40), nodes = n,
    entities = { [1] = 2, X = { module = {}, shard_count = 1e300 } },
    limits = setmetatable({}, { __pairs = error }),
}

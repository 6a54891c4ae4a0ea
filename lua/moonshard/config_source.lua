-- moonshard.config_source: finds the line of a config field in the
-- script's source text, for moonshard.config's "FILE:LINE: field" errors.
-- A small Lua lexer that skips strings and comments: a key is looked up
-- inside the table constructor of its parent; a script that does not end
-- in `return { ... }` gets a plain text search instead.

local type = type
local ipairs = ipairs
local find = string.find
local gmatch = string.gmatch
local gsub = string.gsub
local sub = string.sub
local match = string.match

local M = {}

-- Tokens: { kind = "name"|"string"|"number"|"op", value = text, line = n }.
-- Only as much of Lua as locating keys needs: strings and comments are
-- skipped whole so brackets and keys inside them do not count.
local function tokenize(src)
    local toks, n = {}, 0
    local pos, line, len = 1, 1, #src

    local function push(kind, value, at_line)
        n = n + 1
        toks[n] = { kind = kind, value = value, line = at_line }
    end

    local function newlines(from, to)
        local c = 0
        for _ in gmatch(sub(src, from, to), "\n") do
            c = c + 1
        end
        return c
    end

    -- Skips a long bracket "[==[ ... ]==]" opening at `p`; returns the
    -- position after it, or nil when `p` does not open one.
    local function long_bracket(p)
        local level = match(src, "^%[(=*)%[", p)
        if not level then
            return nil
        end
        local _, e = find(src, "]" .. level .. "]", p, true)
        e = e or len
        line = line + newlines(p, e)
        return e + 1
    end

    if sub(src, 1, 1) == "#" then -- shebang line
        pos = find(src, "\n", 1, true) or len + 1
    end

    while pos <= len do
        local c = sub(src, pos, pos)
        if c == "\n" then
            line = line + 1
            pos = pos + 1
        elseif find(c, "^%s") then
            pos = pos + 1
        elseif c == "-" and sub(src, pos + 1, pos + 1) == "-" then
            pos = long_bracket(pos + 2)
                or find(src, "\n", pos, true) or len + 1
        elseif c == "\"" or c == "'" then
            local start_line = line
            local i = pos + 1
            while i <= len do
                local d = sub(src, i, i)
                if d == "\\" then
                    if sub(src, i + 1, i + 1) == "\n" then
                        line = line + 1
                    end
                    i = i + 2
                elseif d == c or d == "\n" then
                    break
                else
                    i = i + 1
                end
            end
            push("string", sub(src, pos + 1, i - 1), start_line)
            pos = i + 1
        elseif c == "[" and match(src, "^%[=*%[", pos) then
            local start_line = line
            local e = long_bracket(pos)
            push("string", "", start_line)
            pos = e
        elseif find(c, "^%d") or (c == "." and find(src, "^%.%d", pos)) then
            local e = pos
            while true do
                local d = sub(src, e + 1, e + 1)
                if find(d, "^[%w_%.]") or ((d == "+" or d == "-")
                        and find(sub(src, e, e), "^[eEpP]")) then
                    e = e + 1
                else
                    break
                end
            end
            push("number", sub(src, pos, e), line)
            pos = e + 1
        elseif find(c, "^[%a_]") then
            local name = match(src, "^[%a_][%w_]*", pos)
            push("name", name, line)
            pos = pos + #name
        else
            local op = match(src, "^%.%.%.", pos)
                or match(src, "^[=~<>]=", pos)
                or match(src, "^%.%.", pos)
                or match(src, "^::", pos)
                or c
            push("op", op, line)
            pos = pos + #op
        end
    end
    return toks
end

local OPENERS = { ["{"] = true, ["("] = true, ["["] = true,
                  ["function"] = true, ["if"] = true, ["do"] = true,
                  ["repeat"] = true }
local CLOSERS = { ["}"] = true, [")"] = true, ["]"] = true,
                  ["end"] = true, ["until"] = true }

local function depth_delta(tok)
    if tok.kind ~= "op" and tok.kind ~= "name" then
        return 0
    end
    if OPENERS[tok.value] then
        return 1
    elseif CLOSERS[tok.value] then
        return -1
    end
    return 0
end

local function is_op(tok, value)
    return tok ~= nil and tok.kind == "op" and tok.value == value
end

-- Index of the `{` of the last top-level `return { ... }`, or nil.
local function find_root(toks)
    local depth, root = 0, nil
    for i, tok in ipairs(toks) do
        if depth == 0 and tok.kind == "name" and tok.value == "return"
            and is_op(toks[i + 1], "{") then
            root = i + 1
        end
        depth = depth + depth_delta(tok)
    end
    return root
end

-- Finds the field `key` (a string, or an integer for positional items) in
-- the table constructor whose `{` is toks[open]. Returns the index of the
-- token that names it (the key, or the value for a positional item) and
-- the index of its value's first token; nil when absent.
local function find_field(toks, open, key)
    local depth = 0
    local positional = 0
    local at_item = true
    local i = open + 1
    while toks[i] do
        local tok = toks[i]
        if depth == 0 then
            if is_op(tok, "}") then
                return nil
            end
            if is_op(tok, ",") or is_op(tok, ";") then
                at_item = true
                i = i + 1
                tok = toks[i]
                if not tok then
                    return nil
                end
            end
            if at_item and not is_op(tok, "}") then
                at_item = false
                local k, value_at
                if tok.kind == "name" and is_op(toks[i + 1], "=") then
                    k, value_at = tok.value, i + 2
                elseif is_op(tok, "[") and toks[i + 1]
                    and is_op(toks[i + 2], "]") and is_op(toks[i + 3], "=") then
                    local kt = toks[i + 1]
                    if kt.kind == "string" then
                        k = kt.value
                    elseif kt.kind == "number" then
                        k = tonumber(kt.value)
                    end
                    value_at = i + 4
                else
                    positional = positional + 1
                    k, value_at = positional, i
                end
                if k == key and toks[value_at] then
                    return i, value_at
                end
            end
        end
        depth = depth + depth_delta(tok)
        if depth < 0 then
            return nil
        end
        i = i + 1
    end
    return nil
end

local function split_lines(src)
    local lines = {}
    for l in gmatch(src .. "\n", "([^\n]*)\n") do
        lines[#lines + 1] = l
    end
    return lines
end

-- The plain text search, for scripts that do not `return { ... }`.
local function locate_by_text(src, path)
    local lines = split_lines(src)
    local line = 1
    for _, key in ipairs(path) do
        if type(key) ~= "string" then
            break
        end
        local pattern = "%f[%w_]" .. gsub(key, "%W", "%%%0") .. "%s*=%f[^=]"
        local found
        for l = line, #lines do
            if find(lines[l], pattern) then
                found = l
                break
            end
        end
        if not found then
            break
        end
        line = found
    end
    return line
end

-- Returns the line of the field at `path` (a list of keys) in `src`.
local function locate(src, path)
    if type(src) ~= "string" then
        return 1
    end
    local toks = tokenize(src)
    local open = find_root(toks)
    if not open then
        return locate_by_text(src, path)
    end
    local line = toks[open].line
    for _, key in ipairs(path) do
        if not open then
            break
        end
        local at, value_at = find_field(toks, open, key)
        if not at then
            break
        end
        line = toks[at].line
        open = is_op(toks[value_at], "{") and value_at or nil
    end
    return line
end

-- Line of the last top-level `return`, for "must return a table".
local function locate_return(src)
    if type(src) ~= "string" then
        return 1
    end
    local toks = tokenize(src)
    local depth, line = 0, 1
    for _, tok in ipairs(toks) do
        if depth == 0 and tok.kind == "name" and tok.value == "return" then
            line = tok.line
        end
        depth = depth + depth_delta(tok)
    end
    return line
end

M.locate = locate
M.locate_return = locate_return

return M

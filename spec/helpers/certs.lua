-- spec/helpers/certs.lua: certificates for the TLS specs, made with the
-- `openssl` command line (Debian's openssl package, in .ci/deps) into a
-- directory: P-256 keys, valid two days, each leaf with the subject
-- alternative names IP:127.0.0.1 and DNS:localhost (a gateway's
-- certificate is checked by curl against them).
--
--     local certs = require "helpers.certs"
--     certs.ca(dir, "ca")              -- dir/ca.pem, dir/ca.key
--     certs.leaf(dir, "ca", "n1")      -- dir/n1.pem, dir/n1.key (signed
--                                      -- by ca)

local sh = require "helpers.sh"

local format = string.format

local M = {}

local function run(cmd)
    local out, rc = sh(cmd)
    if rc ~= 0 then
        error(format("%s: exit %s\n%s", cmd, tostring(rc), out), 2)
    end
    return out
end

-- A self-signed CA certificate `name` in `dir`.
function M.ca(dir, name)
    run(format("openssl req -x509 -newkey ec -pkeyopt "
               .. "ec_paramgen_curve:P-256 -nodes -keyout %s/%s.key "
               .. "-out %s/%s.pem -days 2 -subj /CN=%s", dir, name, dir,
               name, name))
end

-- A certificate `name` in `dir` signed by the CA `ca` (made by M.ca).
function M.leaf(dir, ca, name)
    local ext = dir .. "/san.cnf"
    local f = assert(io.open(ext, "w"))
    f:write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    f:close()
    run(format("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
               .. "-nodes -keyout %s/%s.key -out %s/%s.csr -subj /CN=%s",
               dir, name, dir, name, name))
    run(format("openssl x509 -req -in %s/%s.csr -CA %s/%s.pem -CAkey "
               .. "%s/%s.key -CAcreateserial -out %s/%s.pem -days 2 "
               .. "-extfile %s", dir, name, dir, ca, dir, ca, dir, name,
               ext))
end

return M

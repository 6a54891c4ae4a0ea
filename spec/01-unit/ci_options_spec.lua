-- spec/01-unit/ci_options_spec.lua: .ci/run and .ci/sanitize refuse bad
-- options with exit 2 before they install, build or run anything.

local sh = require "helpers.sh"

describe(".ci scripts", function()
    it(".ci/run refuses words after --layers LIST (they were ignored)",
       function()
        local out, rc = sh(".ci/run --layers tests bogus")
        assert.equal(2, rc, out)
        assert.matches("usage: .ci/run", out, 1, true)
        assert.not_matches("=== .ci/run: layer", out, 1, true)
    end)

    it(".ci/run refuses a layer it does not have", function()
        local out, rc = sh(".ci/run --layers tests,nemsis")
        assert.equal(2, rc, out)
        assert.matches("no layer 'nemsis'", out, 1, true)
    end)

    it(".ci/sanitize refuses MS_SANITIZE_JOBS that is no whole number "
       .. ">= 1 (0 waited forever) before it builds", function()
        for _, v in ipairs({ "0", "abc", "-1", "1.5" }) do
            local out, rc = sh("MS_SANITIZE_JOBS=" .. v
                               .. " timeout 30 .ci/sanitize x_spec.lua")
            assert.equal(2, rc, out)
            assert.matches("MS_SANITIZE_JOBS must be a whole number",
                           out, 1, true)
            assert.not_matches("sanitize: build took", out, 1, true)
        end
    end)
end)

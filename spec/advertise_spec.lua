-- The address a syncer advertises (issue 37, item 1): its address file holds one its
-- learners on other hosts can reach (the interface that routes off the syncer's host and
-- the bound port, not 127.0.0.1); --advertise with no port takes the bound one.  The run
-- across two network namespaces is spec/runtime_spec.lua's ("... joined by veth").
local diloco = require "diloco"

describe("the address a syncer advertises", function()
  it("is the bound port on the host --listen or --advertise names, a wildcard becoming a routed address", function()
    assert.are.equal("127.0.0.1:7001", diloco.advertise_address("127.0.0.1:0", 7001))
    assert.are.equal("10.0.0.5:7001", diloco.advertise_address("0.0.0.0:0", 7001, "10.0.0.5"))
    assert.are.equal("10.0.0.5:7001", diloco.advertise_address("0.0.0.0:0", 7001, "10.0.0.5:0"))
    assert.are.equal("node7:9000", diloco.advertise_address("0.0.0.0:0", 7001, "node7:9000"))
    assert.are.equal("[fe80::1]:7001", diloco.advertise_address("0.0.0.0:0", 7001, "fe80::1"))
    assert.are.equal("[::1]:7001", diloco.advertise_address("[::1]:0", 7001))
    local routed = diloco.advertise_address("0.0.0.0:0", 7001)
    assert.is_nil(routed:match("^0%.0%.0%.0"), routed)
    assert.matches("^%d+%.%d+%.%d+%.%d+:7001$", routed)
    local ok, e = pcall(diloco.advertise_address, "0.0.0.0:0", 7001, "host:99999")
    assert.is_false(ok)
    assert.matches("--advertise host:99999: expected HOST:PORT, or HOST (or HOST:0)", tostring(e), 1, true)
  end)
end)

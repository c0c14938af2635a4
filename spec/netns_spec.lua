-- A run across hosts as the docs launch it (issue 37, item 1): the syncer in one network
-- namespace listening on 0.0.0.0:0 with --address-file, two learners in another, joined
-- by a veth pair, finding it through that file.  The file must hold an address they can
-- reach (the interface that routes off the syncer's host, and the bound port), not
-- 127.0.0.1; --advertise with no port takes the bound one.  Needs root and `ip netns`
-- (iproute2): skipped, saying why, where namespaces cannot be made.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")
local H = require "spec.helpers"

local function sh(cmd)
  local out, code = H.sh(cmd)
  return out, code
end

-- a program's path (diloco.proc.spawn runs a path, it does not search PATH)
local function which(prog)
  local out, code = sh("command -v " .. prog)
  return code == 0 and out:match("^%s*(%S+)") or prog
end

-- Two namespaces joined by veth: A at 10.213.S.1/24, B at 10.213.S.2/24 (S from the pid,
-- so runs on one machine do not meet).  Returns their names and A's address, or nil and
-- why they cannot be made here.
local function make_namespaces()
  local tag = tostring(diloco.pid() % 100000)
  local a, b = "dlcA" .. tag, "dlcB" .. tag
  local sub = diloco.pid() % 250 + 1
  local ipa, ipb = string.format("10.213.%d.1", sub), string.format("10.213.%d.2", sub)
  local script = table.concat({
    "set -e",
    string.format("ip netns add %s", a),
    string.format("ip netns add %s", b),
    string.format("ip link add va%s type veth peer name vb%s", tag, tag),
    string.format("ip link set va%s netns %s", tag, a),
    string.format("ip link set vb%s netns %s", tag, b),
    string.format("ip -n %s addr add %s/24 dev va%s", a, ipa, tag),
    string.format("ip -n %s addr add %s/24 dev vb%s", b, ipb, tag),
    string.format("ip -n %s link set va%s up", a, tag),
    string.format("ip -n %s link set vb%s up", b, tag),
    string.format("ip -n %s link set lo up", a),
    string.format("ip -n %s link set lo up", b),
  }, "\n")
  local out, code = sh("sh -c '" .. script .. "' 2>&1")
  if code ~= 0 then
    sh(string.format("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", a, b))
    return nil, out
  end
  return { a = a, b = b, ipa = ipa }
end

local function drop_namespaces(ns)
  sh(string.format("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", ns.a, ns.b))
end

describe("a run across network namespaces", function()
  local S, ns, why
  setup(function()
    ns, why = make_namespaces()
  end)
  teardown(function()
    if ns then drop_namespaces(ns) end
  end)
  before_each(function() S = H.scratch() end)
  after_each(function() S.cleanup() end)

  it("has its learners find the syncer through the address file written with --listen 0.0.0.0:0", function()
    if not ns then
      print("\nskipped: cannot make network namespaces here (needs root and iproute2): " .. tostring(why))
      return
    end
    local path = H.tiny_recipe(S, "netns", { count = 2, steps = 60 })
    local addr, out = S.dir .. "/address", S.dir .. "/run"
    local ip, env = which("ip"), which("env")
    local syncer = assert(diloco.proc.spawn { ip, "netns", "exec", ns.a, exe, "syncer", path, "--listen",
      "0.0.0.0:0", "--address-file", addr, "--out", out, "--quiet", stdout = S.dir .. "/syncer.log",
      stderr = S.dir .. "/syncer.log" })
    local ok, err = pcall(function()
      local learners = {}
      for id = 1, 2 do
        learners[id] = assert(diloco.proc.spawn { ip, "netns", "exec", ns.b, env, "OMP_NUM_THREADS=1", exe,
          "learner", path, "--connect", "@" .. addr, "--id", tostring(id), "--secret-file", out .. "/secret",
          "--out", string.format("%s/learner-%d", out, id), "--quiet",
          stdout = string.format("%s/learner-%d.log", S.dir, id),
          stderr = string.format("%s/learner-%d.log", S.dir, id) })
      end
      for id = 1, 2 do
        local st = diloco.proc.wait(learners[id], true)
        assert.are.equal(0, st.exited,
          table.concat(H.read_lines(string.format("%s/learner-%d.log", S.dir, id)), "\n"))
      end
      local st = diloco.proc.wait(syncer, true)
      syncer = nil
      assert.are.equal(0, st.exited, table.concat(H.read_lines(S.dir .. "/syncer.log"), "\n"))
      -- the file holds A's routed address and the bound port, not 127.0.0.1 or port 0
      local first = H.read_lines(addr)[1]
      local host, port = first:match("^(.-):(%d+)$")
      assert.are.equal(ns.ipa, host, first)
      assert.is_true(tonumber(port) > 0, first)
      local s
      for _, l in ipairs(H.read_lines(out .. "/metrics.jsonl")) do
        local e = diloco.json_decode(l)
        if e.event == "summary" then s = e end
      end
      assert.is_true(s.merges > 0, "merges " .. tostring(s.merges))
      assert.are.equal(first, s.address)
    end)
    if syncer then
      diloco.proc.signal(syncer, "KILL")
      diloco.proc.wait(syncer, true)
    end
    assert(ok, err)
  end)
end)

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

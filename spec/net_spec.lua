-- diloco.net (lua/lnet.c over net/include/diloco/net.h, docs/lua-api.md): a server and a
-- client in this one process over loopback (127.0.0.1, port 0), each a Net with its own
-- I/O thread.  Authentication and the HELLO/WELCOME handshake, frames and payloads both
-- ways, a wrong secret refused on both sides, bad options raising and bad configuration
-- returning nil, message, code, counters, a shaped link, closing.  Timeouts are generous
-- (deadlines of seconds on events that take milliseconds), so the spec stays
-- deterministic on a loaded machine; it runs in a few seconds.
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

local SECRET = "correct horse battery staple"
local NUMEL = { 100, 256, 7 }
local HELLO = { run = "net-spec", model_hash = "00000000deadbeef", plan_hash = 42 }

local function opts(extra)
  local o = { secret = SECRET, heartbeat = 0, reconnect_max = 0, drain_timeout = 1,
              layout = { numel = NUMEL }, hello = {} }
  for k, v in pairs(HELLO) do o.hello[k] = v end
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

-- The next event of `kind` on net within `timeout` seconds (others are collected in the
-- second result); fails the test naming what did arrive.
local function wait(net, kind, timeout)
  local deadline = diloco.clock() + (timeout or 5)
  local others = {}
  while diloco.clock() < deadline do
    local ev = net:poll(0.05)
    if ev then
      if ev.kind == kind then return ev, others end
      others[#others + 1] = ev
    end
  end
  local seen = {}
  for _, ev in ipairs(others) do seen[#seen + 1] = ev.kind .. (ev.code and ("/" .. ev.code) or "") end
  error(("no %s event within %g s (saw: %s)"):format(kind, timeout or 5, table.concat(seen, ", ")), 2)
end

-- A server, a client connected to it, both READY: server, client, the client's peer id
-- for the server, the server's peer id for the client, the two READY events.
local function pair(sopts, copts)
  local server = assert(diloco.net.new(opts(sopts)))
  local port = assert(server:listen("127.0.0.1:0"))
  assert.is_true(math.type(port) == "integer" and port > 0)
  local client = assert(diloco.net.new(opts(copts)))
  local cpeer = assert(client:connect("127.0.0.1:" .. port))
  local cready = wait(client, "ready")
  local sready = wait(server, "ready")
  assert.are.equal(cpeer, cready.peer)
  return server, client, cpeer, sready.peer, cready, sready, port
end

local function f32(values) return diloco.codec_encode("f32", diloco.tensor(values)) end

describe("diloco.net", function()
  it("authenticates with the secret, shakes hands and round-trips frames with payloads intact", function()
    local server, client, cpeer, speer, cready, sready = pair(
      { hello = { run = "net-spec", model_hash = "00000000deadbeef", plan_hash = 42,
                  endpoints = { "", "10.0.0.2:7070" }, owner = { 1, 2, 1 } } },
      { hello = { run = "net-spec", model_hash = 0xdeadbeef, plan_hash = "2a", learner = 3,
                  caps = { "gradient", "resync_phase", "sharded" }, codecs = { "f32", "int4" } } })
    -- the server sees the client's HELLO, the client the negotiated WELCOME
    assert.are.equal("net-spec", sready.hello.run)
    assert.are.equal(3, sready.hello.learner)
    assert.are.same({ "f32", "int4" }, sready.hello.codecs)
    assert.are.equal("00000000deadbeef", cready.hello.model_hash)
    assert.are.equal(string.format("%016x", 42), cready.hello.plan_hash)
    assert.are.equal(3, cready.hello.learner)
    assert.are.same({ "resync_phase", "gradient", "sharded" }, cready.hello.caps)
    assert.are.same({ "f32", "int4" }, cready.hello.codecs)
    assert.are.equal(128, cready.hello.block)
    assert.are.equal(3, cready.hello.fragments)
    assert.are.same({ "", "10.0.0.2:7070" }, cready.hello.endpoints)
    assert.are.same({ 1, 2, 1 }, cready.hello.owner)
    assert.matches("127%.0%.0%.1", sready.address)

    -- client -> server: a contribution of fragment 2 (256 floats, f32), bit for bit
    local x = {}
    for i = 1, 256 do x[i] = math.sin(i) * 1e3 end
    local payload = f32(x)
    assert.is_true(client:send(cpeer, { type = "contribution", learner = 3, fragment = 2, version = 7,
                                        steps = 12, tokens = 4096, step_time = 0.25, transit = 0.5,
                                        payload = payload }))
    local ev = wait(server, "frame")
    assert.are.equal(speer, ev.peer)
    assert.are.same({ type = "contribution", learner = 3, fragment = 2, version = 7, steps = 12,
                      tokens = 4096, step_time = 0.25, transit = 0.5, codec = "f32", payload = payload },
                    ev.frame)

    -- server -> client: fragment 3 in int4, a resync, a heartbeat, a bye
    local q = diloco.codec_encode("int4", diloco.tensor({ 1, -2, 3, -4, 5, -6, 7 }))
    assert.is_true(server:send(speer, { type = "fragment", learner = 3, fragment = 3, version = 8,
                                        held = 1.5, age = 2.25, codec = "int4", payload = q }))
    assert.is_true(server:send(speer, { type = "resync", learner = 3, fragment = 1, version = 8,
                                        steps = 100, held = -1, step_time = 0.125,
                                        payload = f32(diloco.zeros(100)) }))
    assert.is_true(server:send(speer, { type = "heartbeat", learner = 1, steps = 5, tokens = 9 }))
    assert.is_true(server:send(speer, { type = "bye", learner = 3, text = "run over" }))
    local got = {}
    for i = 1, 4 do got[i] = wait(client, "frame").frame end
    assert.are.same({ type = "fragment", learner = 3, fragment = 3, version = 8, steps = 0, held = 1.5,
                      age = 2.25, step_time = 0, codec = "int4", payload = q }, got[1])
    assert.are.equal("resync", got[2].type)
    assert.are.equal(-1, got[2].held)
    assert.are.equal(100, got[2].steps)
    assert.are.equal(400, #got[2].payload)
    assert.are.same({ type = "heartbeat", learner = 1, steps = 5, tokens = 9, step_time = 0, transit = 0 }, got[3])
    assert.are.same({ type = "bye", learner = 3, text = "run over" }, got[4])
    server:close()
    client:close()
  end)

  it("without hello is a bare authenticated transport: ready right after auth", function()
    local server = assert(diloco.net.new { secret = SECRET, heartbeat = 0 })
    local port = assert(server:listen("127.0.0.1:0"))
    local client = assert(diloco.net.new { secret = SECRET, heartbeat = 0, reconnect_max = 0 })
    local peer = assert(client:connect("127.0.0.1:" .. port))
    assert.is_nil(wait(client, "ready").hello)
    local sready = wait(server, "ready")
    assert.is_nil(sready.hello)
    assert.is_true(client:send(peer, { type = "heartbeat", steps = 1 }))
    assert.are.equal(1, wait(server, "frame").frame.steps)
    -- no layout: a payload-carrying frame cannot be encoded (misuse: raises)
    assert.matches("layout", error_of(client.send, client, peer,
      { type = "contribution", payload = f32({ 1, 2 }) }):lower())
    server:close()
    client:close()
  end)

  it("with inline_io runs both nets' loops in the polls of one Lua thread", function()
    local server = assert(diloco.net.new { secret = SECRET, inline_io = true, drain_timeout = 0.2 })
    local port = assert(server:listen("127.0.0.1:0"))
    local client = assert(diloco.net.new { secret = SECRET, inline_io = true, drain_timeout = 0.2 })
    local peer = assert(client:connect("127.0.0.1:" .. port))
    -- neither side gets anywhere unless both are polled: the handshake needs both loops
    -- (with I/O threads the client would be ready well within this)
    for _ = 1, 30 do assert.is_nil(client:poll(0.01)) end
    local function either(kind)
      for _ = 1, 2000 do
        for _, net in ipairs { server, client } do
          local ev = net:poll(0.002)
          if ev and ev.kind == kind then return net, ev end
        end
      end
    end
    local a = either("ready")
    local b = select(1, either("ready"))
    assert.are_not.equal(a, b)
    assert.is_true(client:send(peer, { type = "heartbeat", steps = 7 }))
    local net, ev = either("frame")
    assert.are.equal(server, net)
    assert.are.equal(7, ev.frame.steps)
    server:close()
    client:close()
  end)

  it("refuses a wrong secret: the server sees refused/auth, the client lost/auth", function()
    local server = assert(diloco.net.new(opts()))
    local port = assert(server:listen("127.0.0.1:0"))
    local client = assert(diloco.net.new(opts { secret = "not the secret" }))
    local peer = assert(client:connect("127.0.0.1:" .. port))
    local refused = wait(server, "refused")
    assert.are.equal("auth", refused.code)
    assert.is_string(refused.text)
    local lost = wait(client, "lost")
    assert.are.equal(peer, lost.peer)
    assert.are.equal("auth", lost.code)
    -- and the server still serves a client that knows the secret
    local good = assert(diloco.net.new(opts()))
    good:connect("127.0.0.1:" .. port)
    wait(good, "ready")
    wait(server, "ready")
    for _, n in ipairs { server, client, good } do n:close() end
  end)

  it("reads the secret from a file (trailing newline dropped)", function()
    local S = H.scratch()
    local path = S.write("secret", SECRET .. "\n")
    local o = opts()
    o.secret, o.secret_file = nil, path
    local server = assert(diloco.net.new(o))
    local port = assert(server:listen("127.0.0.1:0"))
    local client = assert(diloco.net.new(opts()))
    client:connect("127.0.0.1:" .. port)
    wait(client, "ready")
    server:close()
    client:close()
    S.cleanup()
  end)

  it("speaks TLS behind the tls option: a server's certificate checked against the client's ca", function()
    local S = H.scratch()
    local function selfsigned(name)
      local out, status = H.sh(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        .. "-keyout '%s/%s.key' -out '%s/%s.pem' -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1")
        :format(S.dir, name, S.dir, name))
      assert(status == 0, "openssl (scripts/setup installs it): " .. out)
      return S.dir .. "/" .. name .. ".pem", S.dir .. "/" .. name .. ".key"
    end
    local cert, key = selfsigned("server")
    local other = selfsigned("other")
    local server, client, cpeer = pair({ tls = { cert = cert, key = key } }, { tls = { ca = cert } })
    local payload = f32(diloco.arange(256))
    assert(client:send(cpeer, { type = "contribution", fragment = 2, payload = payload }))
    assert.are.equal(payload, wait(server, "frame").frame.payload)
    -- not checking the server at all works too; a ca that did not sign it is refused
    local blind = assert(diloco.net.new(opts { tls = { insecure = true } }))
    local port = assert(server:listen("127.0.0.1:0"))
    blind:connect("127.0.0.1:" .. port)
    wait(blind, "ready")
    local wrong = assert(diloco.net.new(opts { tls = { ca = other } }))
    wrong:connect("127.0.0.1:" .. port)
    local lost = wait(wrong, "lost")
    assert.are.equal("auth", lost.code)
    assert.matches("certificate verify failed", lost.text)
    -- an unreadable certificate is the environment's: nil, message, DLC_ERR_IO
    local v, msg, code = diloco.net.new(opts { tls = { cert = S.dir .. "/none.pem", key = key } })
    assert.is_nil(v)
    assert.matches("none%.pem", msg)
    assert.are.equal("DLC_ERR_IO", code)
    for _, n in ipairs { server, client, blind, wrong } do n:close() end
    S.cleanup()
  end)

  it("raises on bad options, naming the option and what was expected", function()
    local function bad(o) return error_of(diloco.net.new, o) end
    assert.matches("unknown option 'secrte'", bad { secrte = "x" })
    assert.matches("known: secret, secret_file", bad { secrte = "x" })
    assert.matches("frame_max = 0: expected %d+%.%.%d+", bad(opts { frame_max = 0 }))
    assert.matches("frame_max must be a number", bad(opts { frame_max = "big" }))
    assert.matches("timeout = %-1: expected seconds 0%.%.86400", bad(opts { timeout = -1 }))
    assert.matches("heartbeat = 2 >= timeout = 1", bad(opts { heartbeat = 2, timeout = 1 }))
    assert.matches("out_max = 10: expected", bad(opts { out_max = 10 }))
    assert.matches("max_peers = 1.5: expected .*integer", bad(opts { max_peers = 1.5 }))
    assert.matches("max_unauth = 0: expected 1%.%.4096", bad(opts { max_unauth = 0 }))
    assert.matches("mem_max = 1024 < frame_max = %d+", bad(opts { mem_max = 1024 }))
    assert.matches("max_unauth_per_addr = 1.5: expected .*integer", bad(opts { max_unauth_per_addr = 1.5 }))
    assert.matches("max_unauth_per_addr = 9: expected 1%.%.max_unauth %(8%)",
      bad(opts { max_unauth = 8, max_unauth_per_addr = 9 }))
    assert.matches("no secret", bad { heartbeat = 0 })
    assert.matches("both secret and secret_file", bad(opts { secret_file = "/x" }))
    assert.matches("insecure must be a boolean", bad(opts { insecure = 1 }))
    assert.matches("inline_io must be a boolean, got a number", bad(opts { inline_io = 1 }))
    assert.matches("reconnect_max = 0.05 < reconnect_min = 0.1", bad(opts { reconnect_min = 0.1, reconnect_max = 0.05 }))
    assert.matches("hello: unknown option 'lerner'", bad(opts { hello = { lerner = 2 } }))
    assert.matches("hello: caps%[1%] = sharding: expected one of resync_phase, gradient, sharded",
      bad(opts { hello = { caps = { "sharding" } } }))
    assert.matches("hello: codecs%[2%] = int3: expected one of f32", bad(opts { hello = { codecs = { "f32", "int3" } } }))
    assert.matches("hello: learner = 0: expected a learner 1..65536", bad(opts { hello = { learner = 0 } }))
    assert.matches("hello: model_hash = \"xyz\": expected up to 16 hex digits", bad(opts { hello = { model_hash = "xyz" } }))
    assert.matches("hello: run is 129 bytes: expected at most 128", bad(opts { hello = { run = ("r"):rep(129) } }))
    assert.matches("hello: owner has 2 entries: expected one endpoint index per fragment %(3%)",
      bad(opts { hello = { owner = { 1, 1 } } }))
    assert.matches("hello: owner%[1%] = 2: expected an index into endpoints, 1..1", bad(opts { hello = { owner = { 2, 1, 1 } } }))
    assert.matches("layout: numel%[2%] = 0: expected the floats of fragment 2", bad(opts { layout = { numel = { 5, 0 } } }))
    assert.matches("layout: block = 33: expected an even codec block", bad(opts { layout = { numel = { 5 }, block = 33 } }))
    assert.matches("hello.block = 64 but layout.block = 128", bad(opts { hello = { block = 64 } }))
    assert.matches("tls: cert and key go together", bad(opts { tls = { cert = "/c.pem" } }))
    assert.matches("tls: unknown option 'pem'", bad(opts { tls = { pem = "/c.pem" } }))
    assert.matches("seed = 1.5: expected an integer", bad(opts { seed = 1.5 }))
  end)

  it("returns nil, message, code for bad configuration: address, port in use, secret file", function()
    local server = assert(diloco.net.new(opts()))
    local v, msg, code = server:listen("nonsense")
    assert.is_nil(v)
    assert.matches("nonsense", msg)
    assert.matches("^DLC_ERR_", code)
    local port = assert(server:listen("127.0.0.1:0"))
    local other = assert(diloco.net.new(opts()))
    v, msg, code = other:listen("127.0.0.1:" .. port)
    assert.is_nil(v)
    assert.matches(tostring(port), msg)
    assert.matches("^DLC_ERR_", code)
    v, msg, code = other:connect("nonsense")
    assert.is_nil(v)
    assert.matches("nonsense", msg)
    assert.matches("^DLC_ERR_", code)
    local o = opts()
    o.secret, o.secret_file = nil, "/nonexistent/diloco-secret"
    v, msg, code = diloco.net.new(o)
    assert.is_nil(v)
    assert.matches("/nonexistent/diloco%-secret", msg)
    assert.are.equal("DLC_ERR_IO", code)
    -- misuse of the methods raises
    assert.matches("string expected", error_of(server.listen, server, {}))
    assert.matches("peer id", error_of(server.send, server, "x", { type = "heartbeat" }))
    assert.matches("timeout: expected seconds >= 0", error_of(server.poll, server, -1))
    server:close()
    other:close()
  end)

  it("checks frames before sending: the type, the fields each type takes, their values", function()
    local server, client, cpeer = pair()
    local function bad(f) return error_of(client.send, client, cpeer, f) end
    assert.matches("frame.type = \"welcome\": expected one of heartbeat, contribution", bad { type = "welcome" })
    assert.matches("frame.type must be a string", bad { steps = 1 })
    assert.matches("a heartbeat frame has no field 'fragment' %(it takes type, learner, steps, tokens, step_time, transit%)",
      bad { type = "heartbeat", fragment = 1 })
    assert.matches("a bye frame has no field 'payload'", bad { type = "bye", payload = "x" })
    assert.matches("frame.learner = 0: expected a learner 1..65536", bad { type = "heartbeat", learner = 0 })
    assert.matches("frame.steps = %-1: expected an integer >= 0", bad { type = "heartbeat", steps = -1 })
    assert.matches("frame.codec = int3: expected a codec name", bad { type = "contribution", codec = "int3", payload = "" })
    assert.matches("a gradient frame needs payload", bad { type = "gradient" })
    -- a payload that does not fit the layout (fragment 1 is 100 floats): the encoder's message
    assert.matches("400", bad { type = "contribution", fragment = 1, payload = f32({ 1, 2, 3 }) })
    -- nothing was queued by any of them
    assert.are.equal(0, client:counters(cpeer).frames_out.contribution)
    server:close()
    client:close()
  end)

  it("returns nil, message, DLC_ERR_STATE for a frame to a peer it does not know", function()
    local net = assert(diloco.net.new(opts()))
    local ok, msg, code = net:send(12345, { type = "heartbeat" })
    assert.is_nil(ok)
    assert.is_string(msg)
    assert.are.equal("DLC_ERR_STATE", code)
    assert.is_nil(net:poll(0.01)) -- nothing happened: nil on timeout
    ok, msg, code = net:counters(12345)
    assert.is_nil(ok)
    assert.is_string(msg)
    assert.matches("^DLC_ERR_", code)
    net:close()
  end)

  it("counts frames and bytes by type in both directions", function()
    local server, client, cpeer, speer = pair()
    for i = 1, 3 do assert(client:send(cpeer, { type = "heartbeat", steps = i })) end
    local payload = f32(diloco.zeros(256))
    assert(client:send(cpeer, { type = "contribution", fragment = 2, payload = payload }))
    for _ = 1, 4 do wait(server, "frame") end
    local c = client:counters(cpeer)
    assert.are.equal("ready", c.state)
    assert.are.equal(3, c.frames_out.heartbeat)
    assert.are.equal(1, c.frames_out.contribution)
    assert.is_true(c.bytes_out.contribution > #payload)
    assert.is_true(c.bytes_out.heartbeat > 3 * 16)
    local s = server:counters(speer)
    assert.are.equal(3, s.frames_in.heartbeat)
    assert.are.equal(1, s.frames_in.contribution)
    assert.are.equal(c.bytes_out.contribution, s.bytes_in.contribution)
    assert.are.equal(c.bytes_out.heartbeat, s.bytes_in.heartbeat)
    assert.is_true(s.frames_in.total >= 4)
    local all = server:counters()
    assert.is_nil(all.state)
    assert.are.equal(1, all.accepted)
    assert.are.equal(3, all.frames_in.heartbeat)
    server:close()
    client:close()
  end)

  it("shapes a link: 1 MiB at 4 MiB/s takes >= 0.2 s, unshaped much less; latency delays a frame", function()
    local big = { 100, 262144, 7 } -- fragment 2: 1 MiB of f32
    local server, client, cpeer = pair({ layout = { numel = big } }, { layout = { numel = big } })
    local payload = string.rep("\0\0\128\63", 262144) -- 1.0f, 1 MiB
    local function transfer()
      local t0 = diloco.clock()
      assert(client:send(cpeer, { type = "contribution", fragment = 2, payload = payload }))
      local ev = wait(server, "frame", 10)
      assert.are.equal(#payload, #ev.frame.payload)
      assert.is_true(ev.frame.payload == payload)
      return diloco.clock() - t0
    end
    local free = transfer()
    assert.is_true(client:shape(cpeer, { rate = 4 * 1048576 }))
    local shaped = transfer()
    assert.is_true(shaped >= 0.2, ("shaped transfer took %.3f s"):format(shaped))
    assert.is_true(free < shaped, ("unshaped %.3f s, shaped %.3f s"):format(free, shaped))
    assert.is_true(client:shape(cpeer, { latency = 0.15 })) -- rate 0: the cap is gone
    local t0 = diloco.clock()
    assert(client:send(cpeer, { type = "heartbeat" }))
    wait(server, "frame")
    assert.is_true(diloco.clock() - t0 >= 0.15)
    assert.is_true(client:shape { rate = 0, latency = 0 }) -- every peer
    assert.matches("net:shape: rate = %-1", error_of(client.shape, client, cpeer, { rate = -1 }))
    assert.matches("unknown option 'bandwidth'", error_of(client.shape, client, cpeer, { bandwidth = 1 }))
    server:close()
    client:close()
  end)

  it("refuses a send over out_max with nil, message, DLC_ERR_RANGE, then reports drained", function()
    local server, client, cpeer = pair({}, { out_max = 4096 })
    assert.is_true(client:shape(cpeer, { rate = 1000 })) -- bytes leave at 1000/s: the queue fills
    local payload = f32(diloco.zeros(256)) -- 1 KiB
    local sent, ok, msg, code = 0, nil, nil, nil
    for _ = 1, 20 do
      ok, msg, code = client:send(cpeer, { type = "contribution", fragment = 2, payload = payload })
      if not ok then break end
      sent = sent + 1
    end
    assert.is_nil(ok)
    assert.are.equal("DLC_ERR_RANGE", code)
    assert.matches("out_max = 4096", msg)
    assert.is_true(sent >= 1 and sent <= 4, "sent " .. sent .. " frames of 1 KiB before the refusal")
    assert.is_true(client:counters().refused_full >= 1)
    assert.is_true(client:shape(cpeer, { rate = 0 })) -- uncapped: the queue empties
    assert.are.equal(cpeer, wait(client, "drained").peer)
    assert.is_true(client:send(cpeer, { type = "contribution", fragment = 2, payload = payload }))
    for _ = 1, sent + 1 do assert.are.equal(payload, wait(server, "frame").frame.payload) end
    server:close()
    client:close()
  end)

  it("loses a silent peer (timeout), refuses one over max_peers (overloaded), reconnects under the same id", function()
    -- the client sends no heartbeats; the server gives up on it after 0.3 s.  auth_timeout
    -- 0.5 bounds how long that takes: net/conn.c does not re-arm the connection's timer on
    -- READY, so the first silence check is when the authentication deadline fires.
    local server, client, cpeer, speer = pair({ timeout = 0.3, auth_timeout = 0.5 }, {})
    local lost = wait(server, "lost")
    assert.are.equal(speer, lost.peer)
    assert.are.equal("timeout", lost.code)
    assert.are.equal("timeout", wait(client, "lost").code)
    assert.are.equal(1, server:counters().timeouts)
    server:close()
    client:close()

    server = assert(diloco.net.new(opts { max_peers = 1 }))
    local port = assert(server:listen("127.0.0.1:0"))
    local first = assert(diloco.net.new(opts()))
    first:connect("127.0.0.1:" .. port)
    wait(first, "ready")
    wait(server, "ready")
    local second = assert(diloco.net.new(opts()))
    second:connect("127.0.0.1:" .. port)
    assert.are.equal("overloaded", wait(server, "refused").code)
    assert.are.equal("overloaded", wait(second, "lost").code)
    second:close()

    -- a reconnecting client: the server goes away, comes back on its port, the same peer id is ready again
    local rc = assert(diloco.net.new(opts { reconnect_min = 0.05, reconnect_max = 0.2, seed = 7 }))
    first:close()
    cpeer = assert(rc:connect("127.0.0.1:" .. port))
    wait(rc, "ready")
    server:close()
    assert.are.equal(cpeer, wait(rc, "lost").peer)
    server = assert(diloco.net.new(opts()))
    assert.are.equal(port, assert(server:listen("127.0.0.1:" .. port)))
    assert.are.equal(cpeer, wait(rc, "ready").peer)
    assert.are.equal(1, rc:counters().reconnects)
    assert(rc:send(cpeer, { type = "heartbeat", steps = 3 }))
    assert.are.equal(3, wait(server, "frame").frame.steps)
    rc:close()
    server:close()
  end)

  it("closes a peer (the other side sees lost) and the whole net, idempotently", function()
    local server, client, cpeer, speer = pair()
    assert.is_true(client:close(cpeer))
    local lost = wait(server, "lost")
    assert.are.equal(speer, lost.peer)
    local ok, _, code = client:send(cpeer, { type = "heartbeat" })
    assert.is_nil(ok)
    assert.are.equal("DLC_ERR_STATE", code)
    assert.matches("Net%(", tostring(server))
    server:close()
    server:close()
    assert.are.equal("Net(closed)", tostring(server))
    assert.matches("Net has been closed", error_of(server.poll, server))
    assert.matches("Net has been closed", error_of(server.close, server, 1))
    do
      local n <close> = assert(diloco.net.new(opts()))
      assert(n:listen("127.0.0.1:0"))
    end
    client:close()
    client:close()
  end)

  it("closes when an error leaves a to-be-closed scope, and the collector releases open nets", function()
    local kept
    assert.is_false(pcall(function()
      local n <close> = assert(diloco.net.new(opts()))
      kept = n
      error("boom")
    end))
    assert.are.equal("Net(closed)", tostring(kept))
    for _ = 1, 5 do
      local n = assert(diloco.net.new(opts()))
      assert(n:listen("127.0.0.1:0"))
    end
    collectgarbage("collect")
    collectgarbage("collect")
    local server, client = pair() -- threads joined, ports freed, the heap intact
    server:close()
    client:close()
  end)
end)

-- Checkpoints and JSON from Lua: safetensors round trips (both table forms, 0-d to
-- 4-d, metadata), misuse that raises versus environmental failures that return
-- nil, msg, the atomic replace, JSON encode/decode and their errors, and the two
-- cross-checks with the independent Python reader/writer
-- (scripts/reference/safetensors_check.py).
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

local function flat(v, out)
  out = out or {}
  if type(v) == "number" then
    out[#out + 1] = v
  else
    for _, x in ipairs(v) do flat(x, out) end
  end
  return out
end

local function same_values(a, b)
  local x, y = flat(a:tolist()), flat(b:tolist())
  if #x ~= #y then return false end
  for i = 1, #x do
    if x[i] ~= y[i] and not (x[i] ~= x[i] and y[i] ~= y[i]) then return false end
  end
  return true
end

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok, code
end

-- A scratch directory per run, removed at the end.
local dir
setup(function()
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
end)
teardown(function()
  if dir then os.execute("rm -rf '" .. dir .. "'") end
end)

local function file(name) return dir .. "/" .. name end

local read_all = diloco.replay.read_file

local function write_all(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

describe("save_safetensors / load_safetensors", function()
  it("round-trips tensors of 0 to 4 dims in the given order, bit for bit", function()
    diloco.seed(7)
    local list = {
      { "scalar", diloco.tensor(3.25) },
      { "vec", diloco.randn(5) },
      { "mat", diloco.randn(3, 4) },
      { "cube.4d", diloco.randn(2, 1, 3, 2) },
      { "empty", diloco.zeros(0, 3) },
    }
    assert.is_true(diloco.save_safetensors(file("rt.safetensors"), list, { step = 12, lr = 0.5, recipe = "tiny" }))
    local ts, meta, names = diloco.load_safetensors(file("rt.safetensors"))
    assert.are.same({ "scalar", "vec", "mat", "cube.4d", "empty" }, names)
    for _, e in ipairs(list) do
      local got = ts[e[1]]
      assert.is_true(diloco.is_tensor(got))
      assert.are.same(e[2].shape, got.shape)
      assert.is_true(same_values(e[2], got), e[1])
    end
    assert.are.same({ format = "pt", step = "12", lr = "0.5", recipe = "tiny" }, meta)
  end)

  it("saves a map name -> Tensor sorted by name", function()
    local a, b = diloco.ones(2), diloco.zeros(3)
    assert.is_true(diloco.save_safetensors(file("map.safetensors"), { zeta = a, alpha = b, mid = a }))
    local ts, meta, names = diloco.load_safetensors(file("map.safetensors"))
    assert.are.same({ "alpha", "mid", "zeta" }, names)
    assert.are.same({ format = "pt" }, meta) -- every saved file says so, for Hugging Face loaders
    assert.are.same({ 1, 1 }, ts.mid:tolist())
  end)

  it("returns copies: changing a loaded tensor changes neither the file nor the next load", function()
    diloco.save_safetensors(file("copy.safetensors"), { { "w", diloco.full({ 2 }, 4) } })
    local ts = diloco.load_safetensors(file("copy.safetensors"))
    ts.w:fill(0)
    local again = diloco.load_safetensors(file("copy.safetensors"))
    assert.are.same({ 4, 4 }, again.w:tolist())
  end)

  it("reads the header alone with safetensors_meta: metadata and names, and refuses a file cut short", function()
    local p = file("hdr.safetensors")
    assert.is_true(diloco.save_safetensors(p, { { "b", diloco.ones(3) }, { "a", diloco.zeros(2, 2) } }, { step = 7 }))
    local meta, names = diloco.safetensors_meta(p)
    assert.are.same({ format = "pt", step = "7" }, meta)
    assert.are.same({ "b", "a" }, names)
    local raw = read_all(p)
    write_all(p, raw:sub(1, #raw - 4)) -- the data region cut short: never read, still checked
    local m2, err, code = diloco.safetensors_meta(p)
    assert.is_nil(m2)
    assert.matches("hdr.safetensors", err)
    assert.are.equal("DLC_ERR_FORMAT", code)
    m2, err, code = diloco.safetensors_meta(file("missing.safetensors"))
    assert.is_nil(m2)
    assert.matches("cannot open", err)
    assert.are.equal("DLC_ERR_IO", code)
    assert.matches("path is empty", error_of(diloco.safetensors_meta, ""))
  end)

  it("saves an empty checkpoint", function()
    assert.is_true(diloco.save_safetensors(file("none.safetensors"), {}))
    local ts, meta, names = diloco.load_safetensors(file("none.safetensors"))
    assert.are.same({}, ts)
    assert.are.same({}, names)
  end)

  it("raises on misuse, naming the entry", function()
    local p, t = file("misuse.safetensors"), diloco.ones(1)
    assert.matches("duplicate tensor name 'x'", error_of(diloco.save_safetensors, p, { { "x", t }, { "x", t } }))
    assert.matches("tensor name 0 is empty", error_of(diloco.save_safetensors, p, { { "", t } }))
    assert.matches("mixes", error_of(diloco.save_safetensors, p, { { "x", t }, y = t }))
    assert.matches('tensors%["w"%] must be a Tensor, got number', error_of(diloco.save_safetensors, p, { w = 3 }))
    assert.matches("tensors%[1%]%[2%] must be a Tensor, got nil", error_of(diloco.save_safetensors, p, { { "x" } }))
    assert.matches("must be a {name, tensor} pair", error_of(diloco.save_safetensors, p, { "x" }))
    assert.matches("has a boolean key", error_of(diloco.save_safetensors, p, { [true] = t }))
    assert.matches('metadata%["k"%] must be a string or a number, got boolean',
      error_of(diloco.save_safetensors, p, {}, { k = true }))
    assert.matches("metadata has a number key", error_of(diloco.save_safetensors, p, {}, { "v" }))
    assert.matches("path is empty", error_of(diloco.save_safetensors, "", {}))
    assert.matches("NUL", error_of(diloco.save_safetensors, p .. "\0x", {}))
    assert.matches("table expected", error_of(diloco.save_safetensors, p, 5))
    local freed = diloco.ones(1)
    freed:free()
    assert.matches('tensors%["f"%] has been freed', error_of(diloco.save_safetensors, p, { f = freed }))
    assert.is_nil(read_all(p)) -- nothing was written
  end)

  it("writes metadata values as they are, running no __tostring that could free a tensor", function()
    local p, t = file("meta.safetensors"), diloco.ones(2)
    local smt = getmetatable("")
    smt.__tostring = function(s) t:free(); collectgarbage(); return "changed" end
    local ok, err = pcall(diloco.save_safetensors, p, { { "w", t } }, { note = "hi", step = 3 })
    smt.__tostring = nil
    assert.is_true(ok, err)
    local ts, meta = diloco.load_safetensors(p)
    assert.are.same({ format = "pt", note = "hi", step = "3" }, meta)
    assert.are.same({ 1, 1 }, ts.w:tolist())
  end)

  it("returns nil, msg when the file cannot be written or read", function()
    local ok, msg = diloco.save_safetensors(dir .. "/no/such/dir/x.safetensors", { a = diloco.ones(1) })
    assert.is_nil(ok)
    assert.matches("cannot create the temporary file", msg)
    local ts, err = diloco.load_safetensors(file("missing.safetensors"))
    assert.is_nil(ts)
    assert.matches("missing.safetensors: cannot open", err)
  end)

  it("returns the status name as a third value: DLC_ERR_IO, DLC_ERR_FORMAT", function()
    local ok, msg, code = diloco.save_safetensors(dir .. "/no/such/dir/x.safetensors", { a = diloco.ones(1) })
    assert.is_nil(ok)
    assert.is_string(msg)
    assert.are.equal("DLC_ERR_IO", code)
    local ts, err, c = diloco.load_safetensors(file("missing.safetensors"))
    assert.is_nil(ts)
    assert.matches("cannot open", err)
    assert.are.equal("DLC_ERR_IO", c)
    write_all(file("junk3.bin"), "abc")
    ts, err, c = diloco.load_safetensors(file("junk3.bin"))
    assert.is_nil(ts)
    assert.matches("too short", err)
    assert.are.equal("DLC_ERR_FORMAT", c)
    -- misuse still raises
    assert.matches("path is empty", error_of(diloco.load_safetensors, ""))
    -- and json_decode's failure carries its code too
    local v, jerr, jc = diloco.json_decode("{")
    assert.is_nil(v)
    assert.is_string(jerr)
    assert.are.equal("DLC_ERR_FORMAT", jc)
  end)

  it("returns nil, msg for a file that is not valid safetensors", function()
    write_all(file("junk.bin"), "abc")
    local ts, err = diloco.load_safetensors(file("junk.bin"))
    assert.is_nil(ts)
    assert.matches("junk.bin: file is 3 bytes, too short", err)

    local hdr = '{"w":{"dtype":"F32","shape":[10,20],"data_offsets":[0,400]}}'
    write_all(file("short.safetensors"), string.pack("<I8", #hdr) .. hdr .. string.rep("\0", 400))
    ts, err = diloco.load_safetensors(file("short.safetensors"))
    assert.is_nil(ts)
    assert.matches("tensor 'w': data_offsets %[0, 400%] hold 400 bytes, shape %[10,20%] F32 needs 800", err)

    -- a truncated checkpoint of ours
    diloco.save_safetensors(file("good.safetensors"), { w = diloco.ones(4, 4) })
    local good = read_all(file("good.safetensors"))
    write_all(file("cut.safetensors"), good:sub(1, #good - 3))
    ts, err = diloco.load_safetensors(file("cut.safetensors"))
    assert.is_nil(ts)
    assert.matches("go beyond the 61%-byte data region", err)
    -- and the good one still loads
    assert.are.same({ 4, 4 }, diloco.load_safetensors(file("good.safetensors")).w.shape)
  end)

  it("replaces atomically: a failed save leaves the old file and no temporary file", function()
    local p = file("atomic.safetensors")
    assert.is_true(diloco.save_safetensors(p, { a = diloco.ones(3) }))
    local before = read_all(p)
    pcall(diloco.save_safetensors, p, { { "x", diloco.zeros(9) }, { "x", diloco.zeros(9) } })
    assert.are.equal(before, read_all(p))
    -- an I/O failure after writing the temporary file: renaming over a directory
    local d = file("adir")
    assert(os.execute("mkdir '" .. d .. "' && touch '" .. d .. "/keep'"))
    local ok, msg = diloco.save_safetensors(d, { a = diloco.ones(3) })
    assert.is_nil(ok)
    assert.matches("cannot rename", msg)
    assert.are.equal("", (sh("ls -a '" .. dir .. "' | grep '%.tmp%.' || true")))
    -- a good save replaces it completely
    assert.is_true(diloco.save_safetensors(p, { b = diloco.zeros(100) }))
    local ts, _, names = diloco.load_safetensors(p)
    assert.are.same({ "b" }, names)
    assert.are.equal(100, ts.b.numel)
  end)
end)

describe("json_encode", function()
  local enc = diloco.json_encode

  it("encodes scalars, keeping integers and floats apart", function()
    assert.are.equal("3", enc(3))
    assert.are.equal("3.0", enc(3.0))
    assert.are.equal("-0.0", enc(-0.0))
    -- jansson with 17 significant digits: exact, not always the shortest
    assert.are.equal("0.10000000000000001", enc(0.1))
    assert.are.equal("0.33333333333333331", enc(1 / 3))
    assert.are.equal("1.0000000000000001e300", enc(1e300))
    assert.are.equal("2.5", enc(2.5))
    assert.are.equal("9007199254740992.0", enc(2.0 ^ 53))
    assert.are.equal("1e22", enc(1e22))
    assert.are.equal("9223372036854775807", enc(math.maxinteger))
    assert.are.equal("-9223372036854775808", enc(math.mininteger))
    assert.are.equal("false", enc(false))
    assert.are.equal("true", enc(true))
    assert.are.equal("null", enc(nil))
    assert.are.equal("null", enc(diloco.json_null))
    assert.are.equal('"hi"', enc("hi"))
  end)

  it("escapes strings and keeps UTF-8", function()
    assert.are.equal([["a\"b\\c\n\t\u0001\u0000é"]], enc('a"b\\c\n\t\1\0é'))
    assert.are.equal('{"k\\u0000é":"/\\r\\b\\f\x7f"}', enc({ ["k\0é"] = "/\r\b\f\x7f" }))
    assert.are.equal('"\u{10FFFF}"', enc("\u{10FFFF}"))
  end)

  it("round-trips every float exactly, keeping integers and floats apart", function()
    local dec = diloco.json_decode
    for _, x in ipairs({ 0.1, 1 / 3, 1e300, -1e-300, 2.0 ^ 53, 2.0 ^ 53 + 2, 5e-324, 1.7976931348623157e308,
      123456.789, -2.0, 0.0 }) do
      local y = dec(enc(x))
      assert.are.equal("float", math.type(y), enc(x))
      assert.is_true(x == y, enc(x))
    end
    -- -0.0 keeps its sign
    local z = dec(enc(-0.0))
    assert.is_true(z == 0 and 1 / z == -math.huge)
    for _, n in ipairs({ 0, 1, -1, 1 << 53, math.maxinteger, math.mininteger }) do
      assert.are.equal("integer", math.type(dec(enc(n))))
      assert.are.equal(n, dec(enc(n)))
    end
    local v = { loss = 0.1, lr = 3e-4, step = 7, xs = { 1 / 3, 2.0, -0.5 } }
    assert.are.same(v, dec(enc(v)))
  end)

  it("maps 1..n tables to arrays, others to objects, {} to []", function()
    assert.are.equal("[1,2,[3,[]]]", enc({ 1, 2, { 3, {} } }))
    assert.are.equal('{"a":{"b":[true,false]}}', enc({ a = { b = { true, false } } }))
    assert.are.equal("[1,null,3]", enc({ 1, diloco.json_null, 3 }))
  end)

  it("is compact by default (one line: JSON lines) and can indent and sort", function()
    local v = { step = 3, loss = 2.5, tags = { "a", "b" }, sub = { z = 1, a = {} } }
    local compact = enc(v)
    assert.is_nil(compact:find("[\n ]"))
    assert.is_nil(enc({ a = { 1, 2, { b = "x y" } }, c = 0.1 }):find("[\n\r\t]"))
    assert.is_nil(enc({ a = { 1, 2, { b = "xy" } }, c = 0.1 }):find(" "))
    assert.are.equal('{"a":[1,2]}', enc({ a = { 1, 2 } }, { indent = 0 }))
    assert.are.equal("[]", enc({}, { indent = 4 }))
    assert.are.equal("[\n    1\n]", enc({ 1 }, { indent = 4 }))
    assert.are.equal('{"a":1,"a\\u0000":2,"ab":3,"b":4}',
      enc({ b = 4, ab = 3, ["a\0"] = 2, a = 1 }, { sort_keys = true }))
    assert.are.equal('{"loss":2.5,"step":3,"sub":{"a":[],"z":1},"tags":["a","b"]}', enc(v, { sort_keys = true }))
    assert.are.equal('{\n  "loss": 2.5,\n  "step": 3,\n  "sub": {\n    "a": [],\n    "z": 1\n  },\n'
      .. '  "tags": [\n    "a",\n    "b"\n  ]\n}', enc(v, { indent = 2, sort_keys = true }))
  end)

  it("raises with the path of the offending value", function()
    assert.are.equal("json_encode: value at .summary.loss is nan (JSON has no NaN)",
      error_of(enc, { summary = { loss = 0 / 0 } }))
    assert.matches("value at .losses%[2%] is %-inf", error_of(enc, { losses = { 1, -math.huge } }))
    assert.matches("value at %(top level%) is inf", error_of(enc, math.huge))
    assert.matches("value at .x is an array with holes %(2 entries, largest key 3%)",
      error_of(enc, { x = { [1] = 1, [3] = 3 } }))
    assert.matches("value at .y is a table with a number key 1: JSON object keys must be strings",
      error_of(enc, { y = { 1, k = 2 } }))
    assert.matches("with a number key 0", error_of(enc, { [0] = 1 }))
    assert.matches("with a boolean key", error_of(enc, { [true] = 1 }))
    assert.matches("value at .f is a function, which JSON cannot represent", error_of(enc, { f = print }))
    assert.matches("is a userdata", error_of(enc, { diloco.ones(1) }))
    assert.matches("value at %[1%] is a string that is not valid UTF%-8", error_of(enc, { "\xff" }))
    assert.matches("value at .s is a string that is not valid UTF%-8", error_of(enc, { s = "\xed\xa0\x80" }))
    assert.matches("value at .a.bad\xc0 is a string that is not valid UTF%-8", error_of(enc, { a = { ["bad\xc0"] = 1 } }))
    assert.matches("value at %(top level%) is a string that is not valid UTF%-8", error_of(enc, "\xc0\x80"))
    assert.matches("value at .a%[2%].b is a thread", error_of(enc, { a = { 1, { b = coroutine.create(print) } } }))
    local cyc = {}
    cyc.next = cyc
    assert.matches("nested deeper than 100 levels %(a cycle%?%)", error_of(enc, cyc))
    assert.matches("unknown option indnet", error_of(enc, {}, { indnet = 2 }))
    assert.matches("indent must be an integer", error_of(enc, {}, { indent = -1 }))
    assert.matches("sort_keys must be a boolean", error_of(enc, {}, { sort_keys = 1 }))
  end)

  it("accepts nesting up to 100 levels", function()
    local v = {}
    for _ = 1, 99 do v = { v } end
    assert.are.equal(string.rep("[", 100) .. string.rep("]", 100), enc(v))
  end)
end)

describe("json_decode", function()
  local dec = diloco.json_decode

  it("decodes objects, arrays, numbers, strings and literals", function()
    local v = dec('{"a":[1,2.5,"x",true,false],"b":{"c":-7},"u":"\\u00e9\\u0000z"}')
    assert.are.same({ a = { 1, 2.5, "x", true, false }, b = { c = -7 }, u = "é\0z" }, v)
    assert.are.equal("integer", math.type(v.a[1]))
    assert.are.equal("float", math.type(v.a[2]))
    assert.are.equal("float", math.type(dec("2.0")))
    assert.are.equal("hi", dec('"hi"'))
  end)

  it("turns null into an absent key in objects and json_null in arrays", function()
    local v = dec('{"gone":null,"arr":[1,null,3]}')
    assert.is_nil(v.gone)
    assert.are.equal(3, #v.arr)
    assert.are.equal(diloco.json_null, v.arr[2])
    assert.are.equal(diloco.json_null, dec("null"))
    assert.are.equal("json_null", tostring(diloco.json_null))
  end)

  it("round-trips through json_encode", function()
    local v = { name = "run-1", steps = { 1, 2, 3 }, loss = 0.1, nested = { ok = true, ratio = 1 / 3 } }
    local s = diloco.json_encode(v, { sort_keys = true })
    assert.are.same(v, dec(s))
    assert.are.equal(s, diloco.json_encode(dec(s), { sort_keys = true }))
  end)

  it("returns nil and jansson's message with line and column on bad input", function()
    local v, err = dec('{"a":1,')
    assert.is_nil(v)
    assert.matches("^json_decode: .* %(line 1, column 7%)$", err)
    v, err = dec('{\n"a":1,\n"a":2}')
    assert.is_nil(v)
    assert.matches("duplicate object key .*line 3", err)
    v, err = dec("")
    assert.is_nil(v)
    v, err = dec(string.rep("[", 101) .. string.rep("]", 101))
    assert.is_nil(v)
    assert.matches("nested deeper than 100 levels", err)
    assert.is_table(dec(string.rep("[", 100) .. string.rep("]", 100)))
    assert.matches("string expected", error_of(dec, {}))
  end)
end)

describe("the independent Python checker", function()
  local script = (debug.getinfo(1, "S").source:match("^@(.*)spec/[^/]*$") or "") ..
      "scripts/reference/safetensors_check.py"
  local python = "/usr/bin/python3"

  local function have_numpy()
    local f = io.open(python, "r")
    if not f then return false end
    f:close()
    return os.execute(python .. " -c 'import numpy' 2>/dev/null") == true
  end

  local function flat_sum(t)
    local s = 0
    for _, x in ipairs(flat(t:tolist())) do s = s + x end
    return s
  end

  it("accepts a file written by libdiloco and reads the same values (and PyTorch does too)", function()
    if not have_numpy() then
      pending("/usr/bin/python3 with numpy is needed (apt-get install python3-numpy)")
      return
    end
    diloco.seed(3)
    local list = {
      { "wte.weight", diloco.randn(8, 4) },
      { "ln.bias", diloco.randn(4) },
      { "scalar", diloco.tensor(-1.5) },
      { "blocks.0.w", diloco.randn(2, 3, 2, 2) },
      { "none", diloco.zeros(0) },
    }
    local p = file("ours.safetensors")
    assert.is_true(diloco.save_safetensors(p, list, { step = 42, note = "from lua" }))
    local out, ok = sh(python .. " '" .. script .. "' check '" .. p .. "' --json")
    assert.is_true(ok, out)
    local r = assert(diloco.json_decode(out))
    assert.is_true(r.ok)
    assert.is_true(r.padded)
    assert.are.equal(0, r.data_start % 8)
    assert.are.same({ format = "pt", step = "42", note = "from lua" }, r.metadata)
    assert.are.equal(#list, #r.tensors)
    for i, e in ipairs(list) do
      local t = r.tensors[i]
      assert.are.equal(e[1], t.name)
      assert.are.equal("F32", t.dtype)
      assert.are.same(e[2].shape, t.shape)
      assert(math.abs(t.sum - flat_sum(e[2])) <= 1e-9 * math.max(1, math.abs(t.sum)), e[1])
      if r.torch then assert.is_true(t.torch_matches, e[1]) end
    end
  end)

  it("writes F64/F32/F16/BF16 tensors that libdiloco loads with the right values", function()
    if not have_numpy() then
      pending("/usr/bin/python3 with numpy is needed (apt-get install python3-numpy)")
      return
    end
    local p = file("theirs.safetensors")
    local out, ok = sh(python .. " '" .. script .. "' write '" .. p .. "'")
    assert.is_true(ok, out)
    local ts, meta, names = diloco.load_safetensors(p)
    assert.is_table(ts, meta)
    -- file (data) order, which differs from the header's sorted key order
    assert.are.same({ "scale", "emb.weight", "empty", "head.w", "norm.bias" }, names)
    assert.are.same({ format = "pt", writer = "safetensors_check.py" }, meta)
    local want = {}
    for i = 0, 11 do want[#want + 1] = i * 0.25 - 1 end
    assert.are.same({ 3, 4 }, ts["emb.weight"].shape)
    assert.are.same(want, flat(ts["emb.weight"]:tolist()))
    assert.are.same({ 1, -2, 0.333251953125, 65504, 2 ^ -24, -0.0 }, flat(ts["head.w"]:tolist()))
    assert.are.same({ 1, -3, 3.140625, 0.5 }, ts["norm.bias"]:tolist())
    assert.are.same({}, ts["scale"].shape)
    assert.are.equal(string.unpack("f", string.pack("f", 0.1)), ts["scale"]:item())
    assert.are.same({ 0, 5 }, ts["empty"].shape)
  end)

  it("rejects what libdiloco rejects", function()
    if not have_numpy() then
      pending("/usr/bin/python3 with numpy is needed (apt-get install python3-numpy)")
      return
    end
    local hdr = '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' ..
        '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}'
    local p = file("gap.safetensors")
    write_all(p, string.pack("<I8", #hdr) .. hdr .. string.rep("\0", 12))
    local out, ok = sh(python .. " '" .. script .. "' check '" .. p .. "'")
    assert.is_false(not not ok)
    assert.matches("gap", out)
    local ts, err = diloco.load_safetensors(p)
    assert.is_nil(ts)
    assert.matches("leave a gap of 4 bytes", err)
  end)
end)

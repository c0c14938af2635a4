-- diloco.codec_encode / codec_decode / codec_size / codecs (lua/lcodec.c over
-- core/codec.h) and diloco.Plan (lua/lplan.c over core/frag.h) seen from Lua: round trips
-- within the bounds of docs/codecs.md, exact sizes, rejected inputs and bytes; plans over
-- a small GPT that partition every parameter, the strided rule, hashes and lifetime.
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

local CODECS = { "f32", "bf16", "fp8", "int8", "int4", "e3m0" } -- (dense: every element sent)

-- The per-element error bound of docs/codecs.md for x (block absmax amax), with a few
-- ulps of slack for the f32 rounding of the scale.
local BOUND = {
  f32 = function() return 0 end,
  bf16 = function(x) return 2 ^ -8 * math.abs(x) end,
  fp8 = function(x) return math.max(2 ^ -4 * math.abs(x), 2 ^ -10) end,
  int8 = function(_, amax) return amax / 254 * (1 + 1e-5) end,
  int4 = function(_, amax) return amax / 14 * (1 + 1e-5) end,
  e3m0 = function(x, amax) return math.max(math.abs(x) / 3, 2 ^ -7 * amax) * (1 + 1e-5) end,
}

local function check_round_trip(name, x, block)
  local n = x.numel
  local bytes = diloco.codec_encode(name, x, { block = block })
  assert.are.equal(diloco.codec_size(name, n, { block = block }), #bytes)
  local y = diloco.codec_decode(name, bytes, n, { block = block })
  assert.are.same({ n }, y.shape)
  local xs, ys = x:tolist(), y:tolist()
  for b0 = 1, n, block do
    local b1 = math.min(b0 + block - 1, n)
    local amax = 0
    for i = b0, b1 do amax = math.max(amax, math.abs(xs[i])) end
    for i = b0, b1 do
      local err, bound = math.abs(ys[i] - xs[i]), BOUND[name](xs[i], amax)
      assert(err <= bound, ("%s block %d: element %d: |%.9g - %.9g| = %.3g > bound %.3g"):format(
        name, block, i, ys[i], xs[i], err, bound))
    end
  end
end

describe("diloco codecs", function()
  it("lists the codecs in enum order", function()
    local all = { table.unpack(CODECS) }
    all[#all + 1], all[#all + 2] = "sparse2", "sparse4"
    assert.are.same(all, diloco.codecs())
  end)

  it("has the sizes of docs/codecs.md", function()
    local n = 1001
    assert.are.equal(4 * n, diloco.codec_size("f32", n))
    assert.are.equal(2 * n, diloco.codec_size("bf16", n))
    assert.are.equal(n, diloco.codec_size("fp8", n))
    assert.are.equal(n, diloco.codec_size("e4m3", n))
    assert.are.equal(4 * 8 + n, diloco.codec_size("int8", n))           -- block 128: 8 blocks
    assert.are.equal(4 * 8 + 501, diloco.codec_size("int4", n))
    assert.are.equal(4 * 16 + 501, diloco.codec_size("e3m0", n, { block = 64 }))
    assert.are.equal(0, diloco.codec_size("int4", 0))
    -- sparse: per block, a bf16 scale, block/64 one-byte indices and their 2- or 4-bit codes
    assert.are.equal(7 * 5 + 5, diloco.codec_size("sparse2", 1000))
    assert.are.equal(3 * 8 + 8, diloco.codec_size("sparse4", 1000, { block = 256 }))
  end)

  for _, name in ipairs(CODECS) do
    it(name .. " round-trips random data within its documented bound", function()
      local g = diloco.Generator(11)
      for _, std in ipairs { 1, 1e-3 } do
        for _, block in ipairs { 32, 128, 250 } do
          check_round_trip(name, g:randn(1003, { std = std }), block)
        end
      end
    end)
  end

  it("f32 is the identity, bit for bit, for any shape", function()
    local x = diloco.Generator(3):randn(7, 9)
    local y = diloco.codec_decode("f32", diloco.codec_encode("f32", x), x.numel)
    assert.are.same(x:reshape(-1):tolist(), y:tolist())
    local edge = diloco.tensor { -0.0, 1e-40, 3.4028234663852886e38, -3.4028234663852886e38 }
    assert.are.same(edge:tolist(), diloco.codec_decode("f32", diloco.codec_encode("f32", edge), 4):tolist())
    assert.are.equal(string.pack("<f", 1.5), diloco.codec_encode("f32", diloco.tensor { 1.5 }))
  end)

  it("encodes an empty tensor to no bytes", function()
    local e = diloco.zeros(0)
    assert.are.equal("", diloco.codec_encode("int4", e))
    assert.are.equal(0, diloco.codec_decode("int4", "", 0).numel)
  end)

  it("updates an error-feedback tensor so the sum of decoded rounds stays close", function()
    local x = diloco.Generator(5):randn(512, { std = 1e-2 })
    local ef = diloco.zeros(512)
    local acc = diloco.zeros(512)
    local K = 16
    for _ = 1, K do
      acc = acc + diloco.codec_decode("int4", diloco.codec_encode("int4", x, { block = 64, feedback = ef }), 512,
        { block = 64 })
    end
    assert.is_true(ef:abs():sum():item() > 0)
    local with = (acc - x * K):abs():max():item()
    local once = diloco.codec_decode("int4", diloco.codec_encode("int4", x, { block = 64 }), 512, { block = 64 })
    local without = ((once - x) * K):abs():max():item()
    assert(with * 4 < without, ("with feedback %g, without %g"):format(with, without))
  end)

  it("raises on NaN and Inf naming the element", function()
    local x = diloco.ones(300)
    x[6] = 0 / 0
    assert.matches("codec int4: element 5 is nan", error_of(diloco.codec_encode, "int4", x))
    x[6] = 1
    x[300] = -math.huge
    assert.matches("element 299 is %-inf", error_of(diloco.codec_encode, "bf16", x))
    local ef = diloco.zeros(300)
    x[300] = 1
    ef[3] = math.huge
    assert.matches("element 2", error_of(diloco.codec_encode, "int8", x, { feedback = ef }))
    assert.are.equal(math.huge, ef[3]) -- untouched on error
  end)

  it("raises on malformed bytes", function()
    local good = diloco.codec_encode("int8", diloco.ones(100), { block = 32 })
    assert.matches("in_len = 115 bytes, but 100 elements encode to 116",
      error_of(diloco.codec_decode, "int8", good:sub(1, -2), 100, { block = 32 }))
    assert.matches("in_len = 116 bytes, but 99 elements encode to 115",
      error_of(diloco.codec_decode, "int8", good, 99, { block = 32 }))
    local bad_scale = good:sub(1, 4) .. string.pack("<f", -1) .. good:sub(9)
    assert.matches("block 1 has scale %-1", error_of(diloco.codec_decode, "int8", bad_scale, 100, { block = 32 }))
    local nan_scale = string.pack("<f", 0 / 0) .. good:sub(5)
    assert.matches("block 0 has scale", error_of(diloco.codec_decode, "int8", nan_scale, 100, { block = 32 }))
    local f = diloco.codec_encode("f32", diloco.ones(4))
    f = f:sub(1, 8) .. string.pack("<f", math.huge) .. f:sub(13)
    assert.matches("element 2 decodes to inf", error_of(diloco.codec_decode, "f32", f, 4))
    -- a huge n with a short string is refused before anything is allocated
    assert.matches("in_len = 3 bytes", error_of(diloco.codec_decode, "f32", "abc", 1 << 40))
  end)

  it("raises a clear error for wrong arguments", function()
    local x = diloco.ones(10)
    assert.matches("#1.-codec = \"int3\": expected one of f32", error_of(diloco.codec_encode, "int3", x))
    assert.matches("#2.-Tensor expected", error_of(diloco.codec_encode, "int4", { 1, 2 }))
    local freed = diloco.ones(3)
    freed:free()
    assert.matches("tensor has been freed", error_of(diloco.codec_encode, "int4", freed))
    assert.matches("block = 33, expected an even integer in 32..256",
      error_of(diloco.codec_encode, "int4", x, { block = 33 }))
    assert.matches("block = 512", error_of(diloco.codec_size, "int4", 10, { block = 512 }))
    assert.matches("unknown option 'blocks'", error_of(diloco.codec_encode, "int4", x, { blocks = 64 }))
    assert.matches("unknown option 'feedback'", error_of(diloco.codec_decode, "int4", "", 0, { feedback = x }))
    assert.matches("feedback is a string", error_of(diloco.codec_encode, "int4", x, { feedback = "no" }))
    assert.matches("feedback has 9 elements, x has 10",
      error_of(diloco.codec_encode, "int4", x, { feedback = diloco.zeros(9) }))
    assert.matches("feedback overlaps x", error_of(diloco.codec_encode, "int4", x, { feedback = x }))
    assert.matches("#3.-must be >= 0", error_of(diloco.codec_decode, "int4", "", -1))
    assert.matches("#2.-must be >= 0", error_of(diloco.codec_size, "int4", -1))
  end)
end)

local function gpt_params(dim, seed)
  local m = diloco.nn.GPT { vocab = 16, ctx = 8, dim = dim or 16, layers = 3, heads = 2, seed = seed or 0 }
  return diloco.Params(m:parameters())
end

-- Every float of every tensor in exactly one view, views in arena order.
local function assert_partition(plan, params)
  local covered = {}
  local names = params:names()
  for f = 1, #plan do
    local views, last, numel = plan:views(f), -1, 0
    assert.is_true(#views > 0)
    for _, v in ipairs(views) do
      assert.are.equal(names[v.tensor], v.name)
      assert.is_true(v.offset > last)
      last = v.offset
      numel = numel + v.numel
      local t = params:get(v.name)
      local row = t.numel // (t.shape[1] or 1)
      assert.are.equal(params:offset(v.name) + v.row0 * row, v.offset)
      assert.are.equal(v.rows * row, v.numel)
      for e = v.offset, v.offset + v.numel - 1 do
        assert.is_nil(covered[e], v.name .. " overlaps")
        covered[e] = true
      end
    end
    assert.are.equal(4 * numel, plan:bytes(f))
    assert.are.equal(numel, plan:numel(f))
  end
  local total = 0
  for _ in pairs(covered) do total = total + 1 end
  assert.are.equal(params:numel(), total)
end

describe("diloco.Plan", function()
  for _, kind in ipairs { "balanced", "strided", "sequential" } do
    for _, split in ipairs { false, true } do
      it(("%s%s partitions every parameter exactly once"):format(kind, split and " (split_rows)" or ""), function()
        local params = gpt_params()
        for _, P in ipairs { 1, 2, 3 } do
          local plan = diloco.Plan(params, { kind = kind, fragments = P, split_rows = split })
          assert.are.equal(P, #plan)
          assert.are.equal(P, plan.fragments)
          assert.are.equal(kind, plan.kind)
          assert.are.equal(split, plan.split_rows)
          assert.are.equal(params:count(), plan.tensors)
          assert_partition(plan, params)
          plan:close()
        end
      end)
    end
  end

  it("defaults to one balanced fragment", function()
    local plan = diloco.Plan(gpt_params())
    assert.are.equal(1, #plan)
    assert.are.equal("balanced", plan.kind)
    assert.matches("Plan%(balanced, 1 fragments over 40 tensors%)", tostring(plan))
  end)

  it("strided puts blocks.i.* in fragment i mod P (1-based: fragment i mod P + 1)", function()
    local params = gpt_params()
    local plan = diloco.Plan(params, { kind = "strided", fragments = 2 })
    local seen = 0
    for i, name in ipairs(params:names()) do
      local layer = tonumber(name:match("^blocks%.(%d+)%."))
      local f = plan:fragment_of(i)
      assert.is_number(f)
      if layer then
        assert.are.equal(layer % 2 + 1, f, name)
        seen = seen + 1
      end
    end
    assert.are.equal(36, seen)
  end)

  it("fragment_of is nil for a tensor cut into rows", function()
    local params = gpt_params()
    local plan = diloco.Plan(params, { kind = "balanced", fragments = 16, split_rows = true })
    local split = 0
    for i = 1, params:count() do
      if plan:fragment_of(i) == nil then split = split + 1 end
    end
    assert.is_true(split > 0)
    assert_partition(plan, params)
  end)

  it("has 16-hex-digit hashes, equal for identical models and different for another dim", function()
    local a = diloco.Plan(gpt_params(16, 0), { kind = "strided", fragments = 3 })
    local b = diloco.Plan(gpt_params(16, 1), { kind = "strided", fragments = 3 }) -- other values, same model
    local c = diloco.Plan(gpt_params(32, 0), { kind = "strided", fragments = 3 })
    local d = diloco.Plan(gpt_params(16, 0), { kind = "balanced", fragments = 3 })
    for _, p in ipairs { a, b, c, d } do
      assert.matches("^%x+$", p.model_hash)
      assert.are.equal(16, #p.model_hash)
      assert.matches("^%x+$", p.plan_hash)
      assert.are.equal(16, #p.plan_hash)
    end
    assert.are.equal(a.model_hash, b.model_hash)
    assert.are.equal(a.plan_hash, b.plan_hash)
    assert.are_not.equal(a.model_hash, c.model_hash)
    assert.are_not.equal(a.plan_hash, c.plan_hash)
    assert.are.equal(a.model_hash, d.model_hash)
    assert.are_not.equal(a.plan_hash, d.plan_hash)
  end)

  it("outlives its Params (the plan copies what it needs)", function()
    local params = gpt_params()
    local plan = diloco.Plan(params, { fragments = 2 })
    local before = plan:views(1)
    params:close()
    collectgarbage()
    assert.are.same(before, plan:views(1))
  end)

  it("closes twice without harm; a closed plan refuses its methods and properties", function()
    local plan = diloco.Plan(gpt_params(), { fragments = 2 })
    assert.is_false(plan.closed)
    plan:close()
    plan:close()
    assert.is_true(plan.closed)
    assert.matches("Plan%(closed%)", tostring(plan))
    assert.matches("Plan has been closed", error_of(plan.views, plan, 1))
    assert.matches("Plan has been closed", error_of(plan.bytes, plan, 1))
    assert.matches("Plan has been closed", error_of(plan.fragment_of, plan, 1))
    assert.matches("Plan has been closed", error_of(function() return plan.plan_hash end))
    assert.matches("Plan has been closed", error_of(function() return #plan end))
  end)

  it("raises a clear error for wrong arguments", function()
    local params = gpt_params()
    assert.matches("diloco.Params expected", error_of(diloco.Plan, {}))
    assert.matches("kind = \"blocks\": unknown plan; expected balanced, strided or sequential",
      error_of(diloco.Plan, params, { kind = "blocks" }))
    assert.matches("fragments = 0, expected an integer >= 1", error_of(diloco.Plan, params, { fragments = 0 }))
    assert.matches("fragments = 1.5", error_of(diloco.Plan, params, { fragments = 1.5 }))
    assert.matches("split_rows must be a boolean", error_of(diloco.Plan, params, { split_rows = 1 }))
    assert.matches("unknown option 'parts'", error_of(diloco.Plan, params, { parts = 2 }))
    assert.is_truthy(error_of(diloco.Plan, params, { fragments = 41 })) -- more than the 40 tensors
    local closed = gpt_params()
    closed:close()
    assert.matches("Params has been closed", error_of(diloco.Plan, closed))
    local plan = diloco.Plan(params, { fragments = 2 })
    assert.matches("fragment 3 out of range 1..2", error_of(plan.views, plan, 3))
    assert.matches("fragment 0 out of range 1..2", error_of(plan.bytes, plan, 0))
    assert.matches("tensor 41 out of range 1..40", error_of(plan.fragment_of, plan, 41))
  end)
end)

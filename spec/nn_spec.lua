-- diloco.nn as a user sees it: parameter names, order and shapes a PyTorch mirror
-- relies on; seeded determinism; causality; gradients reaching every parameter;
-- mixture-of-experts routing against a per-token reference; small models that
-- actually learn; and constructor options that fail loudly and by name.
local diloco = require "diloco"
local H = require "spec.helpers"
local close = H.close
local assert_near = H.assert_near
local error_of = H.error_of
local nn = diloco.nn

local function assert_error_has(needle, fn, ...)
  local err = error_of(fn, ...)
  assert(err:find(needle, 1, true), ("expected an error containing %q, got %q"):format(needle, err))
  return err
end

-- {"name shape", ...} of a module's parameters, e.g. "wte.weight 256x128"
local function layout(m)
  local out = {}
  for i, p in ipairs(m:parameters()) do
    assert.are.equal(p[1], p.name)
    assert.are.equal(p[2], p.tensor)
    out[i] = p.name .. " " .. table.concat(p.tensor.shape, "x")
  end
  return out
end

-- Integer token ids [B, T] in [0, vocab) from a seeded generator.
local function tokens(seed, B, T, vocab)
  local r = diloco.Generator(seed):rand(B, T, { hi = vocab }):tolist()
  for i = 1, B do
    for j = 1, T do r[i][j] = math.floor(r[i][j]) end
  end
  return diloco.tensor(r)
end

local function labels(seed, B, classes)
  local r = diloco.Generator(seed):rand(B, { hi = classes }):tolist()
  for i = 1, B do r[i] = math.floor(r[i]) end
  return diloco.tensor(r)
end

local function max_abs_diff(a, b) return (a - b):abs():max():item() end

-- Adam without weight decay, as tensor ops under no_grad (the C optimizer is not
-- part of this spec).  Returns step() that updates every parameter from its .grad.
local function adam(model, lr)
  local ps = model:parameters()
  local m, v = {}, {}
  for i, p in ipairs(ps) do
    m[i] = diloco.zeros(p.tensor.shape)
    v[i] = diloco.zeros(p.tensor.shape)
  end
  local t, b1, b2 = 0, 0.9, 0.999
  return function()
    t = t + 1
    local c1, c2 = 1 - b1 ^ t, 1 - b2 ^ t
    diloco.no_grad(function()
      for i, p in ipairs(ps) do
        local w, g = p.tensor, p.tensor.grad
        if g then
          m[i]:copy(m[i]:scale(b1) + g:scale(1 - b1))
          v[i]:copy(v[i]:scale(b2) + (g * g):scale(1 - b2))
          w:copy(w - m[i]:scale(lr / c1) / (v[i]:scale(1 / c2):sqrt() + 1e-8))
        end
      end
    end)
  end
end

-- Runs `steps` Adam steps of loss_fn() on model; returns the first and last loss.
local function train(model, loss_fn, steps, lr)
  local step = adam(model, lr)
  local first, last
  for s = 1, steps do
    model:zero_grad()
    local loss = loss_fn()
    if s == 1 then first = loss:item() end
    last = loss:item()
    loss:backward()
    step()
  end
  if os.getenv("NN_SPEC_VERBOSE") then print(("train: %.4f -> %.4f"):format(first, last)) end
  return first, last
end

-- Every parameter got a gradient with at least one non-zero entry.
local function assert_all_grads(model)
  for _, p in ipairs(model:parameters()) do
    local g = p.tensor.grad
    assert(g ~= nil, p.name .. " got no gradient")
    assert(g:abs():max():item() > 0, p.name .. " has an all-zero gradient")
  end
end

local GPT_BLOCK = {
  "ln1.weight %d", "ln1.bias %d", "attn.qkv.weight %d3x%d", "attn.qkv.bias %d3",
  "attn.proj.weight %dx%d", "attn.proj.bias %d", "ln2.weight %d", "ln2.bias %d",
  "mlp.fc.weight %dHx%d", "mlp.fc.bias %dH", "mlp.proj.weight %dx%dH", "mlp.proj.bias %d",
}

-- the expected GPT layout, written out as the PyTorch mirror will name it
local function gpt_layout(vocab, ctx, dim, layers, hidden, tied)
  local want = { ("wte.weight %dx%d"):format(vocab, dim), ("wpe.weight %dx%d"):format(ctx, dim) }
  local sizes = { [dim] = dim }
  for l = 0, layers - 1 do
    for _, f in ipairs(GPT_BLOCK) do
      local s = f:gsub("%%d3", tostring(3 * dim)):gsub("%%dH", tostring(hidden)):gsub("%%d", tostring(dim))
      want[#want + 1] = ("blocks.%d."):format(l) .. s
    end
  end
  want[#want + 1] = ("ln_f.weight %d"):format(dim)
  want[#want + 1] = ("ln_f.bias %d"):format(dim)
  if not tied then want[#want + 1] = ("head.weight %dx%d"):format(vocab, dim) end
  return want, sizes
end

describe("nn.GPT parameters", function()
  it("are named and ordered like the PyTorch reference (tied head)", function()
    local g = nn.GPT { vocab = 32, ctx = 8, dim = 16, layers = 2, heads = 2, seed = 1 }
    assert.are.same(gpt_layout(32, 8, 16, 2, 64, true), layout(g))
    assert.are.equal(2 + 12 * 2 + 2, #g:parameters())
    -- 32*16 + 8*16 + 2*(16+16 + 16*48+48 + 16*16+16 + 16+16 + 16*64+64 + 64*16+16) + 32
    assert.are.equal(512 + 128 + 2 * 3280 + 32, g:num_params())
    assert.is_nil(g.head)
  end)

  it("add head.weight last when untied", function()
    local g = nn.GPT { vocab = 32, ctx = 8, dim = 16, layers = 1, heads = 4, tied = false, seed = 1 }
    local want = gpt_layout(32, 8, 16, 1, 64, false)
    assert.are.same(want, layout(g))
    assert.are.equal("head.weight", g:parameters()[#want].name)
    assert.are.equal(512 + 128 + 3280 + 32 + 512, g:num_params())
  end)

  it("match the charlm size", function()
    local g = nn.GPT { seed = 1 } -- vocab 256, ctx 64, dim 128, 4 layers, 4 heads
    assert.are.equal(52, #g:parameters())
    assert.are.equal(834304, g:num_params())
    assert.are.equal(g:num_params(), g:num_active_params())
  end)

  it("follow norm = rmsnorm (weights only) and mlp_ratio", function()
    local g = nn.GPT { vocab = 8, ctx = 4, dim = 8, layers = 1, heads = 2, norm = "rmsnorm", mlp_ratio = 2, seed = 1 }
    assert.are.same({
      "wte.weight 8x8", "wpe.weight 4x8", "blocks.0.ln1.weight 8", "blocks.0.attn.qkv.weight 24x8",
      "blocks.0.attn.qkv.bias 24", "blocks.0.attn.proj.weight 8x8", "blocks.0.attn.proj.bias 8",
      "blocks.0.ln2.weight 8", "blocks.0.mlp.fc.weight 16x8", "blocks.0.mlp.fc.bias 16",
      "blocks.0.mlp.proj.weight 8x16", "blocks.0.mlp.proj.bias 8", "ln_f.weight 8",
    }, layout(g))
  end)

  it("are initialised as GPT-2: N(0, 0.02), residual projections scaled, biases 0, norms 1", function()
    local g = nn.GPT { vocab = 256, ctx = 64, dim = 128, layers = 8, heads = 4, seed = 3 }
    local function std_is(want, name)
      local t = g:parameter(name)
      local got = ((t - t:mean()) ^ 2):mean():sqrt():item()
      assert(math.abs(got - want) < 0.05 * want, ("%s: std %.5f, expected %.5f"):format(name, got, want))
    end
    std_is(0.02, "wte.weight")
    std_is(0.02, "wpe.weight")
    std_is(0.02, "blocks.3.attn.qkv.weight")
    std_is(0.02, "blocks.3.mlp.fc.weight")
    std_is(0.02 / math.sqrt(16), "blocks.3.mlp.proj.weight")
    std_is(0.02 / math.sqrt(16), "blocks.0.attn.proj.weight")
    assert.are.equal(0, g:parameter("blocks.1.attn.qkv.bias"):abs():max():item())
    local ln2 = g:parameter("blocks.1.ln2.weight")
    assert.are.same({ 1, -1 }, { ln2:max():item(), (-ln2):max():item() }) -- all ones
    assert.are.equal(1, g:parameter("ln_f.weight"):mean():item())
    assert.are.equal(0, g:parameter("ln_f.bias"):abs():max():item())
    for _, p in ipairs(g:parameters()) do
      assert.is_true(p.tensor.requires_grad, p.name)
      assert.is_true(p.tensor.is_leaf, p.name)
    end
  end)

  it("parameter(name) finds a tensor and children() lists the direct children", function()
    local g = nn.GPT { vocab = 16, ctx = 4, dim = 8, layers = 2, heads = 2, seed = 1 }
    assert.are.equal(g.blocks[2].attn.qkv.weight, g:parameter("blocks.1.attn.qkv.weight"))
    assert.is_nil(g:parameter("blocks.2.attn.qkv.weight"))
    local names = {}
    for i, c in ipairs(g:children()) do names[i] = c.name end
    assert.are.same({ "wte", "wpe", "blocks.0", "blocks.1", "ln_f" }, names)
  end)
end)

describe("nn.GPT forward", function()
  local cfg = { vocab = 24, ctx = 8, dim = 16, layers = 2, heads = 2 }
  local function gpt(seed, extra)
    local o = { seed = seed }
    for k, v in pairs(cfg) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    return nn.GPT(o)
  end

  it("returns logits [B*T, vocab]", function()
    local g = gpt(1)
    assert.are.same({ 3 * 8, 24 }, g:forward(tokens(1, 3, 8, 24)).shape)
    assert.are.same({ 3 * 5, 24 }, g(tokens(1, 3, 5, 24)).shape) -- __call, T < ctx
    assert.are.same({ 5, 24 }, g:forward({ 1, 2, 3, 4, 5 }).shape) -- a Lua list is one sequence
  end)

  it("is deterministic for a seed and differs across seeds", function()
    local x = tokens(2, 2, 8, 24)
    local a, b, c = gpt(7):forward(x), gpt(7):forward(x), gpt(8):forward(x)
    assert.are.same(a:tolist(), b:tolist())
    assert.is_true(max_abs_diff(a, c) > 1e-4)
    -- an explicit Generator is the same stream as seed =
    local d = nn.GPT { vocab = 24, ctx = 8, dim = 16, layers = 2, heads = 2, rng = diloco.Generator(7) }
    assert.are.same(a:tolist(), d:forward(x):tolist())
    -- without seed or rng the module generator is used: diloco.seed makes it repeatable
    diloco.seed(11)
    local e = nn.GPT(cfg):forward(x)
    diloco.seed(11)
    assert.are.same(e:tolist(), nn.GPT(cfg):forward(x):tolist())
  end)

  it("is causal: changing token t leaves the logits at positions before t unchanged", function()
    local g = gpt(3)
    local x = tokens(3, 1, 8, 24)
    local before = g:forward(x):tolist()
    local t = 5
    local y = diloco.tensor(x)
    y:set((x:get(1, t) + 7) % 24, 1, t)
    local after = g:forward(y):tolist()
    for pos = 1, t - 1 do assert.are.same(before[pos], after[pos], "position " .. pos) end
    local d = 0
    for j = 1, 24 do d = math.max(d, math.abs(before[t][j] - after[t][j])) end
    assert.is_true(d > 1e-4, "position t itself must change")
  end)

  it("composes embeddings, blocks, ln_f and the (tied or untied) head", function()
    for _, tied in ipairs({ true, false }) do
      local g = gpt(4, { tied = tied })
      local x = tokens(4, 2, 6, 24)
      local h = g.wte:forward(x) + g.wpe:forward(diloco.arange(6))
      for _, b in ipairs(g.blocks) do
        h = h + b.attn(b.ln1(h))
        h = h + b.mlp(b.ln2(h))
      end
      h = g.ln_f(h):reshape(12, 16)
      local want = tied and h:matmul(g.wte.weight:transpose()) or h:matmul(g.head.weight:transpose())
      assert.is_true(max_abs_diff(want, g:forward(x)) < 1e-5, "tied = " .. tostring(tied))
    end
  end)

  it("refuses sequences longer than ctx, naming both", function()
    local g = gpt(1)
    assert_error_has("T = 9 exceeds ctx = 8", g.forward, g, tokens(1, 1, 9, 24))
    assert_error_has("idx has 3 dimensions", g.forward, g, diloco.zeros(1, 2, 3))
  end)
end)

describe("nn.GPT training", function()
  it("sends a gradient to every parameter", function()
    for _, tied in ipairs({ true, false }) do
      local g = nn.GPT { vocab = 16, ctx = 8, dim = 16, layers = 2, heads = 2, tied = tied, seed = 5 }
      local x = tokens(1, 4, 8, 16)
      local loss, ce, logits = g:loss(x, tokens(2, 4, 8, 16))
      assert.are.same({}, loss.shape)
      assert.are.equal(loss, ce) -- no MoE: the loss is the cross-entropy
      assert.are.same(g:forward(x):tolist(), logits:tolist())
      assert.is_true(close(math.log(16), loss:item(), 0.05)) -- near-uniform at init
      loss:backward()
      assert_all_grads(g)
      g:zero_grad()
      for _, p in ipairs(g:parameters()) do assert.are.equal(0, p.tensor.grad:abs():max():item()) end
    end
  end)

  it("accepts targets as [B, T] or [B*T]", function()
    local g = nn.GPT { vocab = 16, ctx = 8, dim = 16, layers = 1, heads = 2, seed = 5 }
    local x, y = tokens(1, 2, 8, 16), tokens(2, 2, 8, 16)
    assert.are.equal(g:loss(x, y):item(), g:loss(x, y:reshape(16)):item())
  end)

  it("overfits a fixed small batch: loss drops by more than half in 50 Adam steps", function()
    local g = nn.GPT { vocab = 32, ctx = 16, dim = 32, layers = 2, heads = 4, seed = 9 }
    local x, y = tokens(3, 4, 16, 32), tokens(4, 4, 16, 32)
    local first, last = train(g, function() return g:loss(x, y) end, 50, 1e-2)
    assert(last < 0.5 * first, ("loss went from %.4f to %.4f"):format(first, last))
  end)
end)

describe("nn.GPT:generate", function()
  local g = nn.GPT { vocab = 20, ctx = 6, dim = 16, layers = 1, heads = 2, seed = 2 }

  it("returns n new ids in [0, vocab) and crops the context to ctx", function()
    local out = g:generate({ 1, 2, 3, 4, 5, 6, 7, 8, 9 }, 12, { rng = diloco.Generator(1) })
    assert.are.equal(12, #out)
    for _, id in ipairs(out) do
      assert.are.equal("integer", math.type(id))
      assert.is_true(id >= 0 and id < 20)
    end
    assert.are.same({}, g:generate({ 3 }, 0))
  end)

  it("is repeatable with a Generator, greedy with temperature 0, and restricted by top_k", function()
    local a = g:generate({ 1, 2 }, 10, { rng = diloco.Generator(5) })
    local b = g:generate({ 1, 2 }, 10, { rng = diloco.Generator(5) })
    assert.are.same(a, b)
    local greedy = g:generate({ 1, 2 }, 5, { temperature = 0 })
    assert.are.same(greedy, g:generate({ 1, 2 }, 5, { temperature = 0 }))
    -- the greedy first token is the argmax of the last logits row
    local logits = diloco.no_grad(g.forward, g, { 1, 2 })
    assert.are.equal(math.floor(logits[2]:argmax():item()), greedy[1])
    -- top_k = 1 samples the argmax whatever the generator says
    assert.are.same(greedy, g:generate({ 1, 2 }, 5, { top_k = 1, rng = diloco.Generator(99) }))
  end)

  it("leaves no graph and restores train mode", function()
    g:train()
    g:generate({ 1 }, 2)
    assert.is_true(g.training and g.blocks[1].attn.training)
    assert.is_true(diloco.grad_enabled())
  end)

  it("checks its arguments", function()
    assert_error_has("prompt = {}: expected a non-empty array", g.generate, g, {}, 3)
    assert_error_has("prompt[2] = 20: expected an integer token id in [0, 20)", g.generate, g, { 1, 20 }, 3)
    assert_error_has("top_k = 21 exceeds vocab = 20", g.generate, g, { 1 }, 3, { top_k = 21 })
    assert_error_has('unknown option "temp"', g.generate, g, { 1 }, 3, { temp = 1 })
    assert_error_has("n = -1", g.generate, g, { 1 }, -1)
  end)
end)

describe("nn.MoE", function()
  -- out_n = sum over the top-k experts e of x_n of  w_ne * expert_e(x_n), with
  -- w_n = the top-k router probabilities renormalised: one token at a time.
  local function naive(moe, x)
    local N, E, k = x:size(1), moe.n_experts, moe.top_k
    local rows = {}
    for n = 1, N do
      local xn = x:slice(1, n, n) -- [1, C]
      local p = xn:matmul(moe.router.weight:transpose()):softmax():tolist()[1]
      local order = {}
      for e = 1, E do order[e] = e end
      table.sort(order, function(a, b)
        if p[a] ~= p[b] then return p[a] > p[b] end
        return a < b
      end)
      local z = 0
      for j = 1, k do z = z + p[order[j]] end
      local acc = diloco.zeros(1, x:size(2))
      for j = 1, k do
        local e = order[j]
        local ex = moe.experts[e]
        local y = xn:matmul(ex.fc.weight:transpose()) + ex.fc.bias
        y = y:gelu():matmul(ex.proj.weight:transpose()) + ex.proj.bias
        acc = acc + y:scale(k > 1 and p[e] / z or p[e])
      end
      rows[n] = acc:tolist()[1]
    end
    return rows
  end

  it("matches a naive per-token reference (top_k = 2 and 1, 2-D and 3-D input)", function()
    for _, k in ipairs({ 2, 1 }) do
      local moe = nn.MoE(6, 10, { experts = 4, top_k = k, rng = diloco.Generator(k) })
      -- router weights large enough that the routing is not a near tie
      moe.router.weight:copy(moe.router.weight:scale(40))
      local x = diloco.Generator(10 + k):randn(9, 6)
      local got = moe:forward(x)
      assert.are.same({ 9, 6 }, got.shape)
      assert_near(naive(moe, x), got:tolist(), 1e-4)
      local got3 = moe:forward(x:reshape(3, 3, 6))
      assert.are.same({ 3, 3, 6 }, got3.shape)
      assert_near(got:tolist(), got3:reshape(9, 6):tolist(), 1e-6)
      local load = 0
      for e = 1, 4 do load = load + moe.load[e] end
      assert.are.equal(9 * k, load)
    end
  end)

  it("computes the Switch load-balancing loss E * sum_e f_e P_e", function()
    local moe = nn.MoE(4, 8, { experts = 3, top_k = 2, rng = diloco.Generator(3) })
    moe.router.weight:copy(moe.router.weight:scale(30))
    local x = diloco.Generator(4):randn(10, 4)
    moe:forward(x)
    local probs = x:matmul(moe.router.weight:transpose()):softmax():tolist()
    local want = 0
    for e = 1, 3 do
      local P = 0
      for n = 1, 10 do P = P + probs[n][e] / 10 end
      want = want + (moe.load[e] / 20) * P
    end
    assert.is_true(close(3 * want, moe.aux_loss:item(), 1e-5))
  end)

  it("names its parameters router.weight, experts.0.fc.weight, ... and counts active ones", function()
    local moe = nn.MoE(8, 16, { experts = 3, top_k = 2, rng = diloco.Generator(1) })
    assert.are.same({
      "router.weight 3x8",
      "experts.0.fc.weight 16x8", "experts.0.fc.bias 16", "experts.0.proj.weight 8x16", "experts.0.proj.bias 8",
      "experts.1.fc.weight 16x8", "experts.1.fc.bias 16", "experts.1.proj.weight 8x16", "experts.1.proj.bias 8",
      "experts.2.fc.weight 16x8", "experts.2.fc.bias 16", "experts.2.proj.weight 8x16", "experts.2.proj.bias 8",
    }, layout(moe))
    local expert = 16 * 8 + 16 + 8 * 16 + 8
    assert.are.equal(24 + 3 * expert, moe:num_params())
    assert.are.equal(24 + 2 * expert, moe:num_active_params())
  end)

  it("in a GPT: blocks.L.moe replaces blocks.L.mlp and the aux loss joins the loss", function()
    local g = nn.GPT { vocab = 16, ctx = 8, dim = 8, layers = 2, heads = 2, mlp_ratio = 2, seed = 4,
      moe = { experts = 3, top_k = 2, aux_weight = 0.5 } }
    local names = layout(g)
    assert.are.equal("blocks.0.ln2.bias 8", names[10])
    assert.are.equal("blocks.0.moe.router.weight 3x8", names[11])
    assert.are.equal("blocks.0.moe.experts.0.fc.weight 16x8", names[12])
    assert.are.equal("blocks.0.moe.experts.2.proj.bias 8", names[23])
    assert.are.equal("blocks.1.ln1.weight 8", names[24])
    for _, n in ipairs(names) do assert.is_nil(n:find("mlp", 1, true), n) end
    local loss, ce = g:loss(tokens(5, 4, 8, 16), tokens(6, 4, 8, 16))
    local aux = g.blocks[1].moe.aux_loss:item() + g.blocks[2].moe.aux_loss:item()
    assert.is_true(close(ce:item() + 0.5 * aux, loss:item(), 1e-5))
    assert.is_true(g:num_active_params() < g:num_params())
  end)

  it("sends a gradient to every parameter, the router included", function()
    local g = nn.GPT { vocab = 16, ctx = 8, dim = 8, layers = 1, heads = 2, seed = 6,
      moe = { experts = 4, top_k = 2 } }
    local loss = g:loss(tokens(7, 8, 8, 16), tokens(8, 8, 8, 16))
    loss:backward()
    for e = 1, 4 do assert.is_true(g.blocks[1].moe.load[e] > 0, "expert " .. e .. " got tokens") end
    assert_all_grads(g)
  end)

  it("trains: a tiny MoE GPT halves its loss on a fixed batch", function()
    local g = nn.GPT { vocab = 32, ctx = 16, dim = 32, layers = 1, heads = 4, seed = 8,
      moe = { experts = 4, top_k = 2 } }
    local x, y = tokens(9, 4, 16, 32), tokens(10, 4, 16, 32)
    local first, last = train(g, function() return g:loss(x, y) end, 50, 1e-2)
    assert(last < 0.5 * first, ("loss went from %.4f to %.4f"):format(first, last))
  end)
end)

describe("nn.ViT", function()
  it("names its parameters patch, pos, blocks.L, ln_f, head", function()
    local v = nn.ViT { image = 8, patch = 4, dim = 16, layers = 1, heads = 2, classes = 3, seed = 1 }
    assert.are.same({
      "patch.weight 16x16", "patch.bias 16", "pos.weight 4x16",
      "blocks.0.ln1.weight 16", "blocks.0.ln1.bias 16", "blocks.0.attn.qkv.weight 48x16",
      "blocks.0.attn.qkv.bias 48", "blocks.0.attn.proj.weight 16x16", "blocks.0.attn.proj.bias 16",
      "blocks.0.ln2.weight 16", "blocks.0.ln2.bias 16", "blocks.0.mlp.fc.weight 32x16",
      "blocks.0.mlp.fc.bias 32", "blocks.0.mlp.proj.weight 16x32", "blocks.0.mlp.proj.bias 16",
      "ln_f.weight 16", "ln_f.bias 16", "head.weight 3x16", "head.bias 3",
    }, layout(v))
    local d = nn.ViT { seed = 1 } -- 28x28, patch 4: 49 tokens of 16 pixels
    assert.are.equal("pos.weight 49x64", layout(d)[3])
    assert.is_false(d.blocks[1].attn.causal)
  end)

  it("cuts images into row-major patches", function()
    -- 2 images 4x4, patch 2: token (pr, pc) holds pixels (2pr+i, 2pc+j), i, j in 0..1
    local v = nn.ViT { image = 4, patch = 2, dim = 8, layers = 1, heads = 2, classes = 2, seed = 1 }
    local x = diloco.arange(32):reshape(2, 16)
    local want = {}
    for b = 0, 1 do
      local img = {}
      for pr = 0, 1 do
        for pc = 0, 1 do
          local tok = {}
          for i = 0, 1 do
            for j = 0, 1 do tok[#tok + 1] = b * 16 + (2 * pr + i) * 4 + 2 * pc + j end
          end
          img[#img + 1] = tok
        end
      end
      want[b + 1] = img
    end
    assert.are.same(want, v:patchify(x):tolist())
    -- channels first: [B, C, H, W] flattened, a token holds every channel's patch
    local v2 = nn.ViT { image = 4, patch = 2, channels = 2, dim = 8, layers = 1, heads = 2, classes = 2, seed = 1 }
    local p = v2:patchify(diloco.arange(32):reshape(1, 32)):tolist()
    assert.are.same({ 0, 1, 4, 5, 16, 17, 20, 21 }, p[1][1])
    assert.are.same({ 10, 11, 14, 15, 26, 27, 30, 31 }, p[1][4])
  end)

  it("attends over all patches: the first token sees the last patch", function()
    local v = nn.ViT { image = 8, patch = 4, dim = 16, layers = 1, heads = 2, classes = 3, seed = 2 }
    local x = diloco.Generator(1):randn(1, 64)
    local b = v.blocks[1]
    local function first_token(img)
      local h = v.patch(v:patchify(img)) + v.pos.weight
      return b(h):tolist()[1][1]
    end
    local before = first_token(x)
    local y = diloco.tensor(x)
    y:set(y:get(1, 64) + 5, 1, 64) -- a pixel of the last patch
    local after = first_token(y)
    local d = 0
    for j = 1, 16 do d = math.max(d, math.abs(before[j] - after[j])) end
    assert.is_true(d > 1e-5)
  end)

  it("returns logits [B, classes], gets every gradient, and learns a synthetic batch", function()
    local v = nn.ViT { image = 8, patch = 4, dim = 16, layers = 2, heads = 2, classes = 4, mlp_ratio = 2, seed = 3 }
    local x, y = diloco.Generator(2):randn(16, 64), labels(3, 16, 4)
    assert.are.same({ 16, 4 }, v:forward(x).shape)
    local l1, l2, logits = v:loss(x, y)
    assert.are.equal(l1, l2)
    assert.are.same(v:forward(x):tolist(), logits:tolist())
    assert.are.same({ 16, 4 }, v:forward(x:reshape(16, 8, 8)).shape)
    v:loss(x, y):backward()
    assert_all_grads(v)
    local first, last = train(v, function() return v:loss(x, y) end, 30, 3e-3)
    assert(last < 0.7 * first, ("loss went from %.4f to %.4f"):format(first, last))
  end)

  it("checks the image size", function()
    local v = nn.ViT { image = 8, patch = 4, dim = 16, layers = 1, heads = 2, classes = 3, seed = 1 }
    assert_error_has("input has 63 values per image, expected channels*image*image = 64", v.forward, v,
      diloco.zeros(2, 63))
  end)
end)

describe("nn.MLPClassifier", function()
  it("names fc.0, fc.1, ..., head and returns logits [B, classes]", function()
    local m = nn.MLPClassifier { input = 12, hidden = { 8, 6 }, classes = 3, seed = 1 }
    assert.are.same({ "fc.0.weight 8x12", "fc.0.bias 8", "fc.1.weight 6x8", "fc.1.bias 6",
      "head.weight 3x6", "head.bias 3" }, layout(m))
    assert.are.same({ 5, 3 }, m(diloco.randn(5, 12)).shape)
    local lin = nn.MLPClassifier { input = 12, hidden = {}, classes = 3, seed = 1 }
    assert.are.same({ "head.weight 3x12", "head.bias 3" }, layout(lin))
  end)

  it("learns a synthetic batch", function()
    local m = nn.MLPClassifier { input = 20, hidden = { 32, 16 }, classes = 5, seed = 2 }
    local x, y = diloco.Generator(5):randn(32, 20), labels(6, 32, 5)
    assert.are.same({ 32, 5 }, select(3, m:loss(x, y)).shape)
    m:loss(x, y):backward()
    assert_all_grads(m)
    local first, last = train(m, function() return m:loss(x, y) end, 40, 1e-2)
    assert(last < 0.3 * first, ("loss went from %.4f to %.4f"):format(first, last))
  end)

  it("applies dropout in training mode only", function()
    local m = nn.MLPClassifier { input = 10, hidden = { 64 }, classes = 2, dropout = 0.5, seed = 3 }
    local x = diloco.Generator(1):randn(4, 10)
    local a, b = m(x), m(x)
    assert.is_true(max_abs_diff(a, b) > 1e-6, "two training forwards draw different masks")
    m:eval()
    assert.is_false(m.drop.training)
    assert.are.same(m(x):tolist(), m(x):tolist())
    m:train()
    assert.is_true(m.drop.training)
  end)
end)

describe("layers", function()
  it("Linear computes x W^T + b over any leading dims, in PyTorch layout", function()
    local l = nn.Linear(3, 2, { rng = diloco.Generator(1) })
    l.weight:copy(diloco.tensor { { 1, 2, 3 }, { -1, 0, 1 } })
    l.bias:copy(diloco.tensor { 0.5, -0.5 })
    local x = diloco.tensor { { { 1, 1, 1 }, { 0, 1, 2 } } } -- [1, 2, 3]
    assert.are.same({ { { 6.5, -0.5 }, { 8.5, 1.5 } } }, l(x):tolist())
    local nb = nn.Linear(3, 2, { bias = false })
    assert.are.same({ "weight 2x3" }, layout(nb))
    assert.are.same({ "weight 2x3", "bias 2" }, layout(l))
  end)

  it("Embedding, LayerNorm, RMSNorm apply their op with their parameters", function()
    local e = nn.Embedding(5, 3, { rng = diloco.Generator(2) })
    local idx = diloco.tensor { { 4, 0 } }
    assert.are.same(e.weight:embedding(idx):tolist(), e(idx):tolist())
    local ln = nn.LayerNorm(4, { eps = 1e-3 })
    local x = diloco.Generator(3):randn(2, 4)
    assert.are.same(x:layernorm(nil, nil, 1e-3):tolist(), ln(x):tolist())
    assert.are.same({ "weight 4", "bias 4" }, layout(ln))
    local rms = nn.RMSNorm(4)
    assert.are.same(x:rmsnorm():tolist(), rms(x):tolist())
    assert.are.same({ "weight 4" }, layout(rms))
  end)

  it("CausalSelfAttention is causal by default and not with causal = false", function()
    local x = diloco.Generator(4):randn(1, 5, 8)
    for _, causal in ipairs({ true, false }) do
      local a = nn.CausalSelfAttention(8, 2, { causal = causal, rng = diloco.Generator(5) })
      local before = a(x):tolist()[1][1]
      local y = diloco.tensor(x)
      y:set(y:get(1, 5, 1) + 3, 1, 5, 1)
      local after = a(y):tolist()[1][1]
      local d = 0
      for j = 1, 8 do d = math.max(d, math.abs(before[j] - after[j])) end
      if causal then assert.are.equal(0, d) else assert.is_true(d > 1e-6) end
    end
  end)

  it("Sequential chains modules and names them 0, 1, ...", function()
    local s = nn.Sequential(nn.Linear(4, 8, { rng = diloco.Generator(1) }), nn.Dropout(0.5),
      nn.Linear(8, 2, { rng = diloco.Generator(2) }))
    assert.are.same({ "0.weight 8x4", "0.bias 8", "2.weight 2x8", "2.bias 2" }, layout(s))
    s:eval()
    local x = diloco.Generator(3):randn(3, 4)
    assert.are.same(s[3](s[1](x)):tolist(), s(x):tolist())
    assert_error_has("Sequential: argument 2 is 5, not a module", nn.Sequential, s, 5)
  end)

  it("Dropout is the identity in eval mode and p = 0", function()
    local d = nn.Dropout(0.3, { rng = diloco.Generator(1) })
    local x = diloco.ones(1000)
    local y = d(x)
    local zeros = 1000 - (y:sum():item() * 0.7 + 0.5) // 1
    assert.is_true(zeros > 220 and zeros < 380, "about 30% dropped, got " .. zeros)
    d:eval()
    assert.are.equal(x, d(x))
    assert.are.equal(x, nn.Dropout(0)(x))
  end)

  it("train/eval propagate to every descendant", function()
    local g = nn.GPT { vocab = 8, ctx = 4, dim = 8, layers = 2, heads = 2, seed = 1 }
    assert.is_true(g.training)
    g:eval()
    assert.is_false(g.training or g.blocks[2].mlp.fc.training or g.ln_f.training)
    g:train(true)
    assert.is_true(g.blocks[2].mlp.fc.training and g.wte.training)
  end)

  it("nn.class makes user modules with the same machinery", function()
    local Net = nn.class("Net")
    function Net:_init(n)
      self:add_module("body", nn.Linear(n, 4, { rng = diloco.Generator(1) }))
      self:add_parameter("gain", diloco.ones(4):requires_grad_())
    end
    function Net:forward(x) return self.body(x) * self.gain end
    local m = Net(3)
    assert.are.same({ "gain 4", "body.weight 4x3", "body.bias 4" }, layout(m))
    assert.are.same({ 2, 4 }, m(diloco.randn(2, 3)).shape)
    assert.is_nil(nn.Net) -- user classes do not land in nn
    assert.is_truthy(tostring(m):find("^Net%(%)"))
  end)

  it("tostring describes the tree and the parameter count", function()
    local g = nn.GPT { vocab = 8, ctx = 4, dim = 8, layers = 1, heads = 2, seed = 1 }
    local s = tostring(g)
    assert.is_truthy(s:find("^GPT%(vocab=8, ctx=4, dim=8, layers=1, heads=2"))
    assert.is_truthy(s:find("[" .. g:num_params() .. " parameters]", 1, true))
    assert.is_truthy(s:find("(blocks.0): Block(8, heads=2)", 1, true))
    assert.is_truthy(s:find("(qkv): Linear(8, 24, bias=true)", 1, true))
    assert.are.equal("nn.GPT", tostring(nn.GPT))
  end)
end)

describe("constructor options", function()
  it("name the option, the value and what is allowed", function()
    assert_error_has("GPT: heads = 3 does not divide dim = 128", nn.GPT, { heads = 3 })
    assert_error_has('GPT: unknown option "layer" (allowed: act, ctx, dim, heads, layers, mlp_ratio, moe, norm, '
      .. "rng, seed, std, tied, vocab)", nn.GPT, { layer = 2 })
    assert_error_has('GPT: dim = "128" (a string): expected a positive integer', nn.GPT, { dim = "128" })
    assert_error_has("GPT: layers = 0 (a number): expected a positive integer", nn.GPT, { layers = 0 })
    assert_error_has("GPT: vocab = 2.5 (a number): expected a positive integer", nn.GPT, { vocab = 2.5 })
    assert_error_has('GPT: norm = "batchnorm": expected one of "layernorm", "rmsnorm"', nn.GPT, { norm = "batchnorm" })
    assert_error_has("GPT: tied = 1 (a number): expected true or false", nn.GPT, { tied = 1 })
    assert_error_has("GPT: rng = 5 (a number): expected a diloco.Generator", nn.GPT, { rng = 5 })
    assert_error_has("GPT: give seed or rng, not both", nn.GPT, { seed = 1, rng = diloco.Generator(1) })
    assert_error_has("GPT: options must be a table, got 5", nn.GPT, 5)
    assert_error_has('GPT: moe: unknown option "expert"', nn.GPT, { moe = { expert = 4 } })
    assert_error_has("GPT: moe.top_k = 5 exceeds moe.experts = 4", nn.GPT, { moe = { experts = 4, top_k = 5 } })
    assert_error_has("GPT: mlp_ratio = 0.3 times dim = 128 is 38.4, not a positive integer", nn.GPT,
      { mlp_ratio = 0.3 })
    assert_error_has("ViT: patch = 5 does not divide image = 28", nn.ViT, { patch = 5 })
    assert_error_has("ViT: heads = 5 does not divide dim = 64", nn.ViT, { heads = 5 })
    assert_error_has("MLPClassifier: hidden = {256, 0} (a table): expected a list of positive integers",
      nn.MLPClassifier, { hidden = { 256, 0 } })
    assert_error_has("MLPClassifier: dropout = 1 (a number): expected a number in [0, 1)", nn.MLPClassifier,
      { dropout = 1 })
    assert_error_has('MLPClassifier: act = "tanh": expected one of "gelu", "relu", "silu"', nn.MLPClassifier,
      { act = "tanh" })
    assert_error_has("MoE: top_k = 3 exceeds experts = 2", nn.MoE, 8, 16, { experts = 2, top_k = 3 })
    assert_error_has("Linear: in = 0 (a number): expected a positive integer", nn.Linear, 0, 4)
    assert_error_has("Linear: missing argument out (a positive integer)", nn.Linear, 4)
    assert_error_has("Linear: std = -1 (a number): expected a non-negative number", nn.Linear, 4, 4, { std = -1 })
    assert_error_has("CausalSelfAttention: heads = 3 does not divide dim = 8", nn.CausalSelfAttention, 8, 3)
    assert_error_has("Block: moe = true (a boolean): expected a table", nn.Block, 8, 2, { moe = true })
    assert_error_has("Dropout: p = 1.5 (a number): expected a number in [0, 1)", nn.Dropout, 1.5)
  end)

  it("point the error at the caller's line", function()
    local err = error_of(nn.GPT, { heads = 3 })
    -- pcall calls the constructor directly, so no line; called from a Lua function:
    local ok, e2 = pcall(function() return nn.GPT { heads = 3 } end)
    assert.is_false(ok)
    assert.is_truthy(tostring(e2):find("nn_spec.lua:%d+: GPT: heads = 3"), tostring(e2))
    assert.is_nil(err:find("diloco/nn", 1, true))
  end)
end)

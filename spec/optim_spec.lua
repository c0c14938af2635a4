-- diloco.Params (one arena per model), diloco.Optimizer and diloco.lr_at seen from
-- Lua: re-pointed tensors that keep working, the arena views, norms and clipping,
-- the decay rule, AdamW/SGD against closed forms, state for checkpoints, a tiny model
-- that learns, and the error messages.
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

local function close(a, b, tol)
  return math.abs(a - b) <= (tol or 1e-6) * math.max(1, math.abs(a), math.abs(b))
end

local function flat_list(t)
  local out = {}
  local function walk(v)
    if type(v) == "number" then out[#out + 1] = v else for _, x in ipairs(v) do walk(x) end end
  end
  walk(t:tolist())
  return out
end

local function model_params()
  diloco.seed(7)
  return {
    { "fc.weight", diloco.randn(3, 4) },
    { "fc.bias", diloco.randn(4) },
    { "tok_emb.weight", diloco.randn(5, 3) },
  }
end

describe("diloco.Params", function()
  it("packs tensors into one arena and reports its layout", function()
    local list = model_params()
    local before = list[1][2]:tolist()
    local p = diloco.Params(list)
    assert.are.equal(3, p:count())
    assert.are.equal(12 + 4 + 15, p:numel())
    assert.are.equal(16 + 16 + 16, p:size()) -- offsets aligned to 16 floats
    assert.are.same({ "fc.weight", "fc.bias", "tok_emb.weight" }, p:names())
    assert.are.equal(0, p:offset("fc.weight"))
    assert.are.equal(16, p:offset("fc.bias"))
    assert.are.equal(32, p:offset("tok_emb.weight"))
    assert.are.same(before, list[1][2]:tolist()) -- values preserved
    assert.matches("Params%(3 tensors, 31 values%)", tostring(p))
  end)

  it("returns the very Tensor objects it was given", function()
    local list = model_params()
    local p = diloco.Params(list)
    assert.are.equal(list[2][2], p:get("fc.bias"))
    assert.is_true(rawequal(list[2][2], p:get("fc.bias")))
    assert.is_nil(p:get("nope"))
    local ts = p:tensors()
    assert.are.equal(3, #ts)
    for i = 1, 3 do
      assert.are.equal(list[i][1], ts[i][1])
      assert.is_true(rawequal(list[i][2], ts[i][2]))
    end
    assert.is_true(list[1][2].requires_grad)
  end)

  it("re-points the tensors: the arena and the tensors are the same memory", function()
    local list = model_params()
    local w, b = list[1][2], list[2][2]
    local p = diloco.Params(list)
    local flat = p:flat()
    assert.are.same({ 48 }, flat.shape)
    -- a write through the flat view is read back through the tensor
    flat[16 + 2] = 42.5
    assert.are.equal(42.5, b[2])
    -- and a write through the tensor shows in the flat view
    w[2][3] = -7
    assert.are.equal(-7, flat[1 * 4 + 3])
    w:fill(0.25)
    assert.are.equal(0.25, flat[12])
    assert.are.equal(0, flat[13]) -- padding stays zero
    -- a view taken from the tensor after packing follows it too
    local row = w[3]
    row[1] = 9
    assert.are.equal(9, flat[2 * 4 + 1])
  end)

  it("keeps a view made before packing on the old memory (documented)", function()
    local list = model_params()
    local w = list[1][2]
    local old_row = w[1]
    local v = w[1][1]
    local p = diloco.Params(list)
    w[1][1] = 100
    assert.are.equal(v, old_row[1]) -- the early view still sees the packing-time value
    assert.are.equal(100, p:flat()[1])
  end)

  it("puts gradients from a backward pass into the grad arena", function()
    local list = model_params()
    local w, b = list[1][2], list[2][2]
    local p = diloco.Params(list)
    local x = diloco.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    local loss = x:matmul(w):bias_add(b):sum()
    loss:backward()
    local g = p:flat_grad()
    -- d loss / d w[i][j] = sum of column i of x; d loss / d b = 2
    for i = 1, 3 do
      for j = 1, 4 do assert.are.equal(({ 5, 7, 9 })[i], g[(i - 1) * 4 + j]) end
    end
    for j = 1, 4 do assert.are.equal(2, g[16 + j]) end
    assert.are.same({ 2, 2, 2, 2 }, b.grad:tolist())
    -- t.grad is a view of the grad arena
    g[17] = 5
    assert.are.equal(5, b.grad[1])
    -- zero_grad clears every gradient at once
    p:zero_grad()
    for _, v in ipairs(flat_list(g)) do assert.are.equal(0, v) end
    assert.are.same({ 0, 0, 0, 0 }, b.grad:tolist())
  end)

  it("computes the global gradient norm and clips it", function()
    local list = model_params()
    local p = diloco.Params(list)
    local g = p:flat_grad()
    local ss = 0
    for i = 1, 48 do
      if i <= 12 or (i > 16 and i <= 20) or (i > 32 and i <= 47) then
        g[i] = (i % 7) - 3
        ss = ss + g[i] ^ 2
      end
    end
    local norm = math.sqrt(ss)
    assert.is_true(close(norm, p:grad_norm()))
    assert.is_true(close(norm, p:clip_grad_norm(norm * 2)))
    assert.is_true(close(norm, p:grad_norm())) -- above the norm: unchanged
    assert.is_true(close(norm, p:clip_grad_norm(1.0))) -- returns the norm before clipping
    assert.is_true(close(1.0, p:grad_norm(), 1e-5))
    assert.matches("max_norm = 0, expected a finite number > 0", error_of(p.clip_grad_norm, p, 0))
    assert.matches("number expected", error_of(p.clip_grad_norm, p, "x"))
  end)

  it("closes idempotently; the tensors keep working", function()
    local list = model_params()
    local w = list[1][2]
    local p = diloco.Params(list)
    local flat = p:flat()
    p:close()
    p:close()
    assert.matches("Params%(closed%)", tostring(p))
    assert.matches("Params has been closed", error_of(p.count, p))
    w[1][1] = 3
    assert.are.equal(3, flat[1]) -- still the arena, kept alive by its tensors
    -- once closed, the tensors can be packed again
    local q = diloco.Params { { "w", w } }
    assert.are.equal(3, q:flat()[1])
    do
      local r <close> = diloco.Params { { "b", list[2][2] } }
      assert.are.equal(1, r:count())
    end
  end)

  it("rejects bad lists with a message naming the entry", function()
    local a, b = diloco.randn(2, 2), diloco.randn(3)
    assert.matches("non%-empty array", error_of(diloco.Params, {}))
    assert.matches("table expected", error_of(diloco.Params, "x"))
    assert.matches("entry 2 is a number", error_of(diloco.Params, { { "a", a }, 5 }))
    assert.matches("entry 1: the name %(entry%[1%]%) is a number", error_of(diloco.Params, { { 1, a } }))
    assert.matches("entry 1 %('a'%): entry%[2%] is nil", error_of(diloco.Params, { { "a" } }))
    local f = diloco.randn(2)
    f:free()
    assert.matches("a freed tensor", error_of(diloco.Params, { { "f", f } }))
    assert.matches("the name 'a' is used twice", error_of(diloco.Params, { { "a", a }, { "a", b } }))
    assert.matches("the same tensor is given twice, as 'a' and 'b'",
      error_of(diloco.Params, { { "a", a }, { "b", a } }))
    assert.matches("empty name", error_of(diloco.Params, { { "", a } }))
    a.requires_grad = true
    local sum = a + a
    assert.matches("tensor 'sum' is the result of an op %(add%), not a leaf",
      error_of(diloco.Params, { { "sum", sum } }))
    assert.matches("'a' and 'row' share memory", error_of(diloco.Params, { { "a", a }, { "row", a[1] } }))
    local p = diloco.Params { { "layer.w", a } }
    assert.matches("tensor 'again' is already in the arena of another live Params %(as 'layer.w'%)",
      error_of(diloco.Params, { { "b", b }, { "again", a } }))
    assert.is_false(b.requires_grad) -- a failed Params leaves its tensors alone
    p:close()
  end)
end)

describe("diloco.Optimizer", function()
  it("decays only matrices that are not embeddings or norms, unless told otherwise", function()
    diloco.seed(1)
    local list = {
      { "wte.weight", diloco.randn(4, 2) },
      { "blocks.0.attn.qkv.weight", diloco.randn(2, 6) },
      { "blocks.0.attn.qkv.bias", diloco.randn(6) },
      { "blocks.0.ln_1.weight", diloco.randn(2) },
      { "tok_emb.weight", diloco.randn(4, 2) },
      { "layernorm.scale2d", diloco.randn(2, 2) },
      { "h.0.ln.proj", diloco.randn(2, 2) },
      { "kiln.weight", diloco.randn(2, 2) },
      { "head.weight", diloco.randn(2, 4) },
    }
    local p = diloco.Params(list)
    local opt = diloco.Optimizer(p, { kind = "adamw" })
    local want = {
      ["wte.weight"] = false, ["blocks.0.attn.qkv.weight"] = true, ["blocks.0.attn.qkv.bias"] = false,
      ["blocks.0.ln_1.weight"] = false, ["tok_emb.weight"] = false, ["layernorm.scale2d"] = false,
      ["h.0.ln.proj"] = false, ["kiln.weight"] = true, ["head.weight"] = true,
    }
    for name, d in pairs(want) do assert.are.equal(d, opt:decays(name), name) end
    -- overrides: decay patterns switch on, no_decay patterns switch off (and win)
    local o2 = diloco.Optimizer(p, { kind = "adamw", decay = { "^wte", "bias$" }, no_decay = { "^head", "qkv%.bias" } })
    assert.is_true(o2:decays("wte.weight"))
    assert.is_false(o2:decays("head.weight"))
    assert.is_false(o2:decays("blocks.0.attn.qkv.bias"))
    assert.is_true(o2:decays("blocks.0.attn.qkv.weight"))
    o2:set_decay("head.weight", true)
    assert.is_true(o2:decays("head.weight"))
    assert.matches("no parameter named 'nope'", error_of(opt.decays, opt, "nope"))
    assert.are.equal("emb", diloco.no_decay_patterns[1])
  end)

  it("takes one AdamW step exactly as torch.optim.AdamW", function()
    local w = diloco.tensor { { 1.0, -2.0 }, { 0.5, 3.0 } }
    local b = diloco.tensor { 0.25, -0.75 }
    local p = diloco.Params { { "w", w }, { "b", b } }
    local opt = diloco.Optimizer(p, { kind = "adamw", lr = 0.1, betas = { 0.8, 0.9 }, eps = 1e-3, weight_decay = 0.5 })
    local g = { 0.2, -0.4, 0.0, 1.0 }
    for i = 1, 4 do w.grad[(i - 1) // 2 + 1][(i - 1) % 2 + 1] = g[i] end
    b.grad[1], b.grad[2] = -0.3, 0.6
    local w0, b0 = flat_list(w), flat_list(b)
    opt:step()
    assert.are.equal(1, opt:step_count())
    -- first step: m_hat = g, v_hat = g^2
    local function upd(p0, gi, decay) return p0 * (1 - 0.1 * (decay and 0.5 or 0)) - 0.1 * gi / (math.abs(gi) + 1e-3) end
    local w1, b1 = flat_list(w), flat_list(b)
    for i = 1, 4 do assert.is_true(close(upd(w0[i], g[i], true), w1[i]), "w " .. i) end
    assert.is_true(close(upd(b0[1], -0.3, false), b1[1]))
    assert.is_true(close(upd(b0[2], 0.6, false), b1[2]))
    -- second step with the same gradients, lr given for this step
    local m, v = {}, {}
    for i = 1, 4 do
      m[i] = 0.8 * (0.2 * g[i]) + 0.2 * g[i]
      v[i] = 0.9 * (0.1 * g[i] ^ 2) + 0.1 * g[i] ^ 2
    end
    opt:step(0.05)
    local w2 = flat_list(w)
    for i = 1, 4 do
      local want = w1[i] * (1 - 0.05 * 0.5) - 0.05 * (m[i] / (1 - 0.8 ^ 2)) / (math.sqrt(v[i] / (1 - 0.9 ^ 2)) + 1e-3)
      assert.is_true(close(want, w2[i]), "w step 2 " .. i)
    end
  end)

  it("takes SGD steps with momentum and Nesterov exactly as torch.optim.SGD", function()
    local w = diloco.tensor { { 1.0, 2.0 } }
    local p = diloco.Params { { "w", w } }
    local opt = diloco.Optimizer(p, { kind = "sgd", lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 })
    assert.is_true(opt:decays("w"))
    local x, buf = { 1.0, 2.0 }, { 0, 0 }
    local g = { 0.5, -1.0 }
    for step = 1, 3 do
      w.grad[1][1], w.grad[1][2] = g[1], g[2]
      opt:step()
      for i = 1, 2 do
        local d = g[i] + 0.01 * x[i]
        buf[i] = step == 1 and d or 0.9 * buf[i] + d
        x[i] = x[i] - 0.1 * (d + 0.9 * buf[i])
      end
      local got = flat_list(w)
      for i = 1, 2 do assert.is_true(close(x[i], got[i]), ("step %d elem %d: %g vs %g"):format(step, i, x[i], got[i])) end
    end
    local st = opt:state()
    assert.are.equal(1, #st)
    assert.are.equal("sgd.momentum.w", st[1][1])
    assert.is_true(close(buf[1], st[1][2][1][1]))
    -- plain SGD has no state
    local q = diloco.Params { { "v", diloco.tensor { 1 } } }
    local plain = diloco.Optimizer(q, { kind = "sgd", lr = 0.5 })
    q:get("v").grad[1] = 2
    plain:step()
    assert.are.equal(0, q:get("v")[1])
    assert.are.same({}, plain:state())
  end)

  it("exposes its state as named views, so a checkpoint round trip is copying", function()
    local function setup()
      diloco.seed(3)
      local list = { { "a", diloco.randn(3, 3) }, { "b", diloco.randn(3) } }
      local p = diloco.Params(list)
      return p, diloco.Optimizer(p, { kind = "adamw", lr = 0.01 })
    end
    local function fake_grads(p, k)
      local g = p:flat_grad()
      for i = 1, 9 do g[i] = math.sin(i * k) end
      for i = 17, 19 do g[i] = math.cos(i * k) end
    end
    local p1, o1 = setup()
    for k = 1, 3 do fake_grads(p1, k); o1:step() end
    local st = o1:state()
    assert.are.same({ "adamw.m.a", "adamw.m.b", "adamw.v.a", "adamw.v.b" },
      { st[1][1], st[2][1], st[3][1], st[4][1] })
    assert.are.same({ 3, 3 }, st[1][2].shape)
    assert.are.same({ 3 }, st[4][2].shape)
    -- restore into a fresh optimizer: parameters, state, step count
    local p2, o2 = setup()
    p2:flat():copy(p1:flat())
    local st2 = o2:state()
    for i = 1, 4 do st2[i][2]:copy(st[i][2]) end
    o2:set_step_count(o1:step_count())
    fake_grads(p1, 4); o1:step()
    fake_grads(p2, 4); o2:step()
    assert.are.same(p1:flat():tolist(), p2:flat():tolist())
    assert.are.equal(4, o2:step_count())
    -- the views outlive the optimizer
    o1:close()
    o1:close()
    assert.is_number(st[1][2][1][1])
    assert.matches("Optimizer has been closed", error_of(o1.step, o1))
  end)

  it("trains a tiny model: AdamW lowers the loss", function()
    diloco.seed(11)
    local x = diloco.randn(64, 4)
    local w_true = diloco.tensor { { 1, -2, 0.5 }, { 0.3, 0.8, -1 }, { -1.5, 0, 2 }, { 0.7, 1.2, -0.4 } }
    local y = x:matmul(w_true)
    local w, b = diloco.randn(4, 3, { std = 0.1 }), diloco.zeros(3)
    local p = diloco.Params { { "w", w }, { "b", b } }
    local opt = diloco.Optimizer(p, { kind = "adamw", lr = 0.05, weight_decay = 0.0 })
    local function loss_value()
      return ((x:matmul(w):bias_add(b) - y) ^ 2):mean()
    end
    local first
    for step = 0, 59 do
      p:zero_grad()
      local loss = loss_value()
      loss:backward()
      first = first or loss:item()
      p:clip_grad_norm(10)
      opt:step(diloco.lr_at(step, { schedule = "cosine", lr = 0.05, warmup = 5, total = 60, min_lr = 0.005 }))
    end
    local last = diloco.no_grad(loss_value):item()
    assert.is_true(last < first / 10, ("loss %g -> %g"):format(first, last))
    assert.are.equal(60, opt:step_count())
  end)

  it("refuses to step once its Params is closed", function()
    local w = diloco.randn(2, 2)
    local p = diloco.Params { { "w", w } }
    local opt = diloco.Optimizer(p, { kind = "sgd" })
    p:close()
    assert.matches("its Params has been closed", error_of(opt.step, opt))
  end)

  it("refuses a Params closed while it is being built (option metamethod, replaced string.find)", function()
    local p = diloco.Params { { "w", diloco.randn(3, 3) } }
    local opts = setmetatable({}, { __index = function(_, k) if k == "lr" then p:close() end end })
    assert.matches("Params has been closed", error_of(diloco.Optimizer, p, opts))
    local p2 = diloco.Params { { "w", diloco.randn(3, 3) }, { "v", diloco.randn(3, 3) } }
    local find = string.find
    string.find = function(...) p2:close(); collectgarbage(); return find(...) end
    local ok, err = pcall(diloco.Optimizer, p2, {})
    string.find = find
    assert.is_false(ok)
    assert.matches("Params has been closed", tostring(err))
  end)

  it("names the bad option or hyper-parameter", function()
    local p = diloco.Params { { "w", diloco.randn(2, 2) } }
    local function err(o) return error_of(diloco.Optimizer, p, o) end
    assert.matches("adamw: beta2 = 1.5, expected a number in %[0, 1%)", err { kind = "adamw", beta2 = 1.5 })
    assert.matches("adamw: beta2 = 1.5, expected a number in %[0, 1%)", err { betas = { 0.9, 1.5 } })
    assert.matches("adamw: lr = %-1, expected a finite number >= 0", err { lr = -1 })
    assert.matches("adamw: eps = 0, expected a finite number > 0", err { eps = 0 })
    assert.matches("sgd: momentum = %-0.5", err { kind = "sgd", momentum = -0.5 })
    assert.matches("sgd: nesterov needs momentum > 0", err { kind = "sgd", nesterov = true })
    assert.matches("kind = 'adam', expected \"adamw\" or \"sgd\"", err { kind = "adam" })
    assert.matches("unknown option 'betas2'", err { betas2 = { 0.9, 0.99 } })
    assert.matches("option 'momentum' is for sgd, not adamw", err { momentum = 0.9 })
    assert.matches("option 'beta1' is for adamw, not sgd", err { kind = "sgd", beta1 = 0.9 })
    assert.matches("give betas = {b1, b2} or beta1/beta2, not both", err { betas = { 0.9, 0.9 }, beta1 = 0.8 })
    assert.matches("option betas must be {beta1, beta2}", err { betas = { 0.9 } })
    assert.matches("option lr must be a number, got string", err { lr = "fast" })
    assert.matches("option nesterov must be a boolean", err { kind = "sgd", momentum = 0.9, nesterov = 1 })
    assert.matches("no_decay%[2%] is a number", err { no_decay = { "x", 3 } })
    assert.matches("no_decay pattern '%[a': malformed pattern", err { no_decay = { "[a" } })
    local opt = diloco.Optimizer(p, { kind = "adamw" })
    assert.matches("adamw: step lr = %-1", error_of(opt.step, opt, -1))
    assert.matches("step count = %-1, expected an integer in %[0, 2%^53%]", error_of(opt.set_step_count, opt, -1))
    assert.matches("Optimizer%(adamw, lr=0.001, weight_decay=0.1, step 0%)", tostring(opt))
  end)
end)

describe("diloco.lr_at", function()
  local cos = { schedule = "cosine", lr = 1.0, warmup = 10, total = 110, min_lr = 0.1 }
  it("warms up linearly from the first step", function()
    assert.is_true(close(0.1, diloco.lr_at(0, cos)))
    assert.is_true(close(0.5, diloco.lr_at(4, cos)))
    assert.is_true(close(1.0, diloco.lr_at(9, cos)))
  end)

  it("decays by cosine or linearly to min_lr at total", function()
    assert.is_true(close(1.0, diloco.lr_at(10, cos)))
    assert.is_true(close(0.55, diloco.lr_at(60, cos)))
    assert.is_true(close(0.1 + 0.45 * (1 + math.cos(math.pi * 0.25)), diloco.lr_at(35, cos)))
    assert.is_true(close(0.1, diloco.lr_at(110, cos)))
    assert.is_true(close(0.1, diloco.lr_at(1000, cos)))
    local lin = { schedule = "linear", lr = 2.0, total = 100 }
    assert.is_true(close(2.0, diloco.lr_at(0, lin)))
    assert.is_true(close(1.0, diloco.lr_at(50, lin)))
    assert.are.equal(0, diloco.lr_at(100, lin))
    assert.is_true(close(0.5, diloco.lr_at(123, { lr = 0.5 }))) -- constant by default
    assert.is_true(close(0.25, diloco.lr_at(0, { lr = 0.5, warmup = 2 })))
  end)

  it("names the bad field", function()
    assert.matches("cosine: total = 10 must be greater than warmup = 10",
      error_of(diloco.lr_at, 0, { schedule = "cosine", lr = 1, warmup = 10, total = 10 }))
    assert.matches("the linear schedule needs total", error_of(diloco.lr_at, 0, { schedule = "linear", lr = 1 }))
    assert.matches("linear: min_lr = 2, expected a number in %[0, lr = 1%]",
      error_of(diloco.lr_at, 0, { schedule = "linear", lr = 1, min_lr = 2, total = 5 }))
    assert.matches("schedule = step, expected", error_of(diloco.lr_at, 0, { schedule = "step", lr = 1 }))
    assert.matches("unknown option 'warm_up'", error_of(diloco.lr_at, 0, { lr = 1, warm_up = 3 }))
    assert.matches("lr must be a number, got nil", error_of(diloco.lr_at, 0, {}))
    assert.matches("warmup must be an integer number of steps, got 1.5", error_of(diloco.lr_at, 0, { lr = 1, warmup = 1.5 }))
    assert.matches("constant: warmup = %-1", error_of(diloco.lr_at, 0, { lr = 1, warmup = -1 }))
    assert.matches("step must be >= 0", error_of(diloco.lr_at, -1, { lr = 1 }))
  end)
end)

-- diloco.recipe in process: defaults, --set parsing, every-field reporting, and the
-- trainer's hooks (a recipe setting the learning rate per step).
local diloco = require "diloco"

local function tiny(extra)
  local r = diloco.recipe {
    model = { arch = "gpt", vocab = 256, ctx = 8, dim = 16, layers = 1, heads = 2 },
    data = diloco.data.synthetic_text { bytes = 5000, ctx = 8, batch = 2 },
    steps = 6, eval = { every = 0, batches = 1 },
  }
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

describe("diloco.recipe", function()
  it("fills every default and keeps given values", function()
    local r = assert(diloco.recipe.validate(tiny()))
    assert.are.equal(0.003, r.inner.lr)
    assert.are.equal("cosine", r.inner.schedule)
    assert.are.equal(0, r.inner.warmup) -- min(100, steps // 10)
    assert.are.equal(1, r.islands.count)
    assert.are.equal(8, r.data.ctx)
    assert.are.equal(0, r.seed)
  end)

  it("parses --set values by type and creates nested sections", function()
    local r = tiny()
    diloco.recipe.set(r, "inner.lr=1e-4")
    diloco.recipe.set(r, "steps=12")
    diloco.recipe.set(r, "inner.schedule=linear")
    diloco.recipe.set(r, "inner.no_decay={'bias', 'ln'}")
    diloco.recipe.set(r, "model.tied=false")
    assert.are.equal(1e-4, r.inner.lr)
    assert.are.equal(12, r.steps)
    assert.are.equal("linear", r.inner.schedule)
    assert.are.same({ "bias", "ln" }, r.inner.no_decay)
    assert.is_false(r.model.tied)
    assert.is_truthy(diloco.recipe.validate(r))
  end)

  it("refuses --set into a value or a function", function()
    local r = tiny()
    assert.has_error(function() diloco.recipe.set(r, "steps.x=1") end, "--set steps.x=1: steps is a number, not a section")
    r.model = function() end
    assert.has_error(function() diloco.recipe.set(r, "model.dim=8") end,
      "--set model.dim=8: model is a function in this recipe; edit the recipe instead")
  end)

  it("reports all problems, not just the first", function()
    local r = tiny { steps = 0, seed = -1, threads = "two" }
    r.inner = { lr = -1, schedule = "step" }
    local ok, errs = diloco.recipe.validate(r)
    assert.is_nil(ok)
    local text = table.concat(errs, "\n")
    assert.matches("steps = 0: expected an integer in [1,", text, 1, true)
    assert.matches("seed = -1: expected an integer in [0,", text, 1, true)
    assert.matches('threads = "two": expected integer', text, 1, true)
    assert.matches("inner.lr = -1: expected a finite number >= 0", text, 1, true)
    assert.matches('inner.schedule = "step": expected one of constant, cosine, linear', text, 1, true)
    assert.are.equal(5, #errs)
  end)

  it("requires a model and data", function()
    local ok, errs = diloco.recipe.validate(diloco.recipe {})
    assert.is_nil(ok)
    local text = table.concat(errs, "\n")
    assert.matches("model: missing", text, 1, true)
    assert.matches("data: missing", text, 1, true)
  end)
end)

describe("the sync section", function()
  local function problems(sync, islands)
    local r = tiny { sync = sync, islands = islands }
    local ok, errs = diloco.recipe.validate(r)
    if ok then return "" end
    return table.concat(errs, "\n")
  end

  it("has a default for every field", function()
    local r = assert(diloco.recipe.validate(tiny()))
    local sy = r.sync
    assert.are.same({ "decoupled", 24, 4, 2, 1, "f32", "f32", 128, false, "balanced", false, 0, "adaptive",
      "tokens2_steps", "rda", 4 }, { sy.preset, sy.H, sy.fragments, sy.tau, sy.quorum, sy.codec, sy.codec_down,
      sy.block, sy.error_feedback, sy.plan, sy.split_rows, sy.alpha, sy.grace, sy.weighting, sy.merge, sy.ring })
  end)

  it("names the field, the value and what is allowed for each bad value", function()
    for _, case in ipairs {
      { { quorum = 5 }, "sync.quorum = 5 but islands.count = 1: quorum must be <= the number of learners" },
      { { tau = 24 }, "sync.tau = 24: the overlap must be below sync.H = 24" },
      { { alpha = 1.5 }, "sync.alpha = 1.5: expected a finite number in [0, 1]" },
      { { alpha = -0.1 }, "sync.alpha = -0.1: expected a finite number in [0, 1]" },
      { { block = 33 }, "sync.block = 33: expected an even integer in [32, 256]" },
      { { block = 512 }, "sync.block = 512: expected an even integer in [32, 256]" },
      { { codec = "int3" }, 'sync.codec = "int3": expected one of f32, bf16, fp8, int8, int4, e3m0' },
      { { codec_down = "int4" }, 'sync.codec_down = "int4": expected one of f32, bf16' },
      { { plan = "random" }, 'sync.plan = "random": expected one of balanced, strided, sequential' },
      { { weighting = "loss" }, 'sync.weighting = "loss": expected one of tokens2_steps, tokens, uniform' },
      { { merge = "median" }, 'sync.merge = "median": expected one of rda, mean' },
      { { ring = 0 }, "sync.ring = 0: expected an integer in [1, 64]" },
      { { grace = "soon" }, 'sync.grace = "soon": expected adaptive, off, or a duration such as "5s"' },
      { { grace = "5 parsecs" }, 'sync.grace = "5 parsecs": expected adaptive, off, or a duration' },
    } do
      assert.matches(case[2], problems(case[1]), 1, true)
    end
  end)

  it("accepts durations and checks island speeds", function()
    assert.are.equal("", problems { grace = "250ms" })
    assert.are.equal("", problems { grace = "off" })
    assert.are.equal("", problems { grace = 2.5 })
    assert.are.equal(0.25, diloco.recipe.parse_duration("250ms"))
    assert.are.equal(90, diloco.recipe.parse_duration("1.5m"))
    assert.are.equal(7200, diloco.recipe.parse_duration("2h"))
    assert.is_nil(diloco.recipe.parse_duration("2 weeks"))
    assert.is_nil(diloco.recipe.parse_duration("-3s"))
    assert.matches("islands.speed[1] = 0: expected a finite number > 0", problems(nil, { speed = { 0 } }), 1, true)
    assert.matches("islands.speed has 2 entries: expected one per island (islands.count = 1)",
      problems(nil, { speed = { 1, 0.5 } }), 1, true)
    assert.are.equal("", problems(nil, { speed = { 0.5 } }))
  end)
end)

describe("the checkpoint section", function()
  it("has periodic defaults and names each bad value", function()
    local r = assert(diloco.recipe.validate(tiny()))
    assert.are.same({ 0, 5, 3 }, { r.checkpoint.every, r.checkpoint.minutes, r.checkpoint.keep })
    for _, case in ipairs {
      { { keep = 0 }, "checkpoint.keep = 0: expected an integer in [1, 1000000]" },
      { { keep = 2.5 }, "checkpoint.keep = 2.5: expected integer" },
      { { minutes = -1 }, "checkpoint.minutes = -1: expected a finite number in [0," },
      { { minutes = 0 / 0 }, "checkpoint.minutes = " },
      { { every = -3 }, "checkpoint.every = -3: expected an integer in [0," },
    } do
      local ok, errs = diloco.recipe.validate(tiny { checkpoint = case[1] })
      assert.is_nil(ok)
      assert.matches(case[2], table.concat(errs, "\n"), 1, true)
    end
  end)
end)

describe("recipe hooks", function()
  it("lets hooks.lr set the rate of every step and reports each step to on_step", function()
    local seen, steps = {}, {}
    local r = tiny { hooks = {
      lr = function(step, lr) seen[#seen + 1] = step; return 0 end,
      on_step = function(info) steps[#steps + 1] = info.lr end,
    } }
    r = assert(diloco.recipe.validate(r))
    local out = os.tmpname()
    os.remove(out)
    local summary = diloco.train.run(r, { out = out, quiet = true })
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, seen)
    assert.are.same({ 0, 0, 0, 0, 0, 0 }, steps)
    assert.are.equal(6, summary.steps)
    -- lr 0 everywhere: AdamW only decays weights by lr*wd = 0, so the model is unchanged
    local t = diloco.load_safetensors(out .. "/model.safetensors")
    local fresh = diloco.nn.GPT { vocab = 256, ctx = 8, dim = 16, layers = 1, heads = 2, seed = 0 }
    for _, p in ipairs(fresh:parameters()) do
      assert.are.same(p[2]:tolist(), t[p[1]]:tolist())
    end
  end)

  it("stops with a clear error when hooks.lr returns nonsense", function()
    local r = assert(diloco.recipe.validate(tiny { hooks = { lr = function() return "fast" end } }))
    local ok, e = pcall(diloco.train.run, r, { out = os.tmpname() .. "d", quiet = true })
    assert.is_false(ok)
    assert.matches('hooks.lr%(1%) returned "fast" %(a string%): expected a finite learning rate >= 0', e.diloco_error)
  end)
end)

describe("an image classifier recipe", function()
  it("trains on synthetic images and reports test accuracy in the summary", function()
    local r = assert(diloco.recipe.validate(diloco.recipe {
      model = { arch = "mlp", input = 784, hidden = { 32 }, classes = 4 },
      data = diloco.data.synthetic_images { count = 400, classes = 4, batch = 20 },
      inner = diloco.optim.adamw { lr = 3e-3 },
      steps = 60, eval = { every = 30, batches = 2 },
    }))
    local out = os.tmpname()
    os.remove(out)
    local summary = diloco.train.run(r, { out = out, quiet = true })
    assert.are.equal(60 * 20, summary.tokens) -- images count as tokens for images
    assert.is_number(summary.final_eval_accuracy)
    assert.is_true(summary.final_eval_accuracy > 0.6, "accuracy " .. summary.final_eval_accuracy)
  end)
end)

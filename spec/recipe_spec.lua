-- diloco.recipe in process: defaults, --set parsing, every-field reporting, and the
-- trainer's hooks (a recipe setting the learning rate per step).
local diloco = require "diloco"
local H = require "spec.helpers"

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

  it("takes --set values as data only: code in them is refused before anything runs", function()
    local r = tiny()
    for _, bad in ipairs { "seed={(function() while true do end end)()}", "steps={('x'):rep(9)}",
        "name={function() end}" } do
      local ok, err = pcall(diloco.recipe.set, r, bad)
      assert.is_false(ok, bad)
      assert.matches("expected data (a number, a quoted string, true, false, or a table of them), without calls or "
        .. "functions", tostring(err), 1, true)
    end
    -- without parentheses nothing callable is reachable (the values see no globals)
    assert.has_error(function() diloco.recipe.set(r, "inner.no_decay={string.rep'x'}") end,
      [[--set inner.no_decay={string.rep'x'}: cannot parse "{string.rep'x'}" as a Lua value]])
    -- parentheses, colons and the word function inside strings are data
    diloco.recipe.set(r, [[inner.no_decay={"ln(1)", 'a:b', "function", [==[x(y)]==]}]])
    assert.are.same({ "ln(1)", "a:b", "function", "x(y)" }, r.inner.no_decay)
    diloco.recipe.set(r, [[name="it's (fine)"]])
    assert.are.equal("it's (fine)", r.name)
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

  it("takes a run name of one path component only (runs/NAME stays in runs/)", function()
    for _, bad in ipairs { "../../x", "a/b", "..", ".", "" } do
      local ok, errs = diloco.recipe.validate(tiny { name = bad })
      assert.is_nil(ok, bad)
      assert.matches(string.format("name = %q: expected a name of one path component", bad), table.concat(errs, "\n"),
        1, true)
    end
    assert.is_table((diloco.recipe.validate(tiny { name = "my-run.2" })))
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
      { { quorum = 1e300 }, 'sync.quorum = 1e+300: expected an integer >= 1, "all" (every live learner)' },
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
      { { dp_history = -1 }, "sync.dp_history = -1: expected an integer in [0, 65536]" },
      { { final_flush = "yes" }, 'sync.final_flush = "yes": expected boolean' },
      { { grace = "soon" }, 'sync.grace = "soon": expected adaptive, off, or a duration such as "5s"' },
      { { grace = "5 parsecs" }, 'sync.grace = "5 parsecs": expected adaptive, off, or a duration' },
    } do
      assert.matches(case[2], problems(case[1]), 1, true)
    end
  end)

  it("bounds the run's fields as core/run.c does, with C's text (one table, read from C)", function()
    -- every bounded run field a recipe sets: its bounds pass, a step past each is refused
    -- naming what C's table expects; the same value refused by C's own check
    local exposed = { ["sync.H"] = true, ["sync.fragments"] = true, ["sync.tau"] = true, ["sync.alpha"] = true,
      ["sync.grace_gamma"] = true, ["sync.ema"] = true, ["sync.ring"] = true, ["outer.lr"] = true,
      ["outer.momentum"] = true, ["sync.grace_s"] = true }
    local seen = 0
    for _, f in ipairs(diloco.machine.fields()) do
      if f.min then
        assert.is_true(exposed[f.name], f.name .. ": a bounded run field the recipe does not check from C")
        seen = seen + 1
        local section, key = f.name:match("^(%a+)%.(.+)$")
        local spec = diloco.recipe.schema[section].fields[key]
        assert.are.equal(f.doc, (spec.doc:gsub("^set by validation: ", ""):gsub(", else nil$", "")))
        local step = f.type == "integer" and 1 or 1e-9
        for _, v in ipairs { f.min - step, f.max + step } do
          if v == v and v ~= math.huge and v ~= -math.huge then
            if f.type == "integer" then v = math.tointeger(v) end
            assert.are.equal(f.expect, spec.check(v), f.name .. " = " .. tostring(v))
          end
        end
        if not f.min_open then assert.is_nil(spec.check(f.type == "integer" and math.tointeger(f.min) or f.min)) end
        if f.max ~= math.huge and not f.max_open then
          assert.is_nil(spec.check(f.type == "integer" and math.tointeger(f.max) or f.max))
        end
      end
    end
    assert.are.equal(10, seen)
    assert.matches("sync.fragments = 1025: expected an integer in [1, 1024]", problems { fragments = 1025 }, 1, true)
    assert.matches("outer.momentum = 1: expected a finite number in [0, 1)",
      table.concat(select(2, diloco.recipe.validate(tiny { outer = { momentum = 1 } })), "\n"), 1, true)
    assert.matches("sync.H = 0: expected an integer >= 1 in a recipe", problems { H = 0 }, 1, true)
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

describe("sync presets", function()
  local FIELDS = { "H", "fragments", "tau", "quorum", "grace", "weighting", "merge", "alpha", "blocking" }
  local function preset_of(r)
    local got = {}
    for i, k in ipairs(FIELDS) do got[i] = r.sync[k] end
    return got
  end

  it("fill every field the recipe does not set (docs/algorithm.md section 5)", function()
    for name, want in pairs {
      dp = { 1, 1, 0, "all", "off", "uniform", "mean", 0, true },
      diloco = { 24, 1, 0, "all", "off", "uniform", "mean", 0, true },
      streaming = { 24, 4, 2, "all", "off", "uniform", "mean", 0.5, false },
      decoupled = { 24, 4, 2, 1, "adaptive", "tokens2_steps", "rda", 0, false },
    } do
      local r = assert(diloco.recipe.validate(tiny { sync = { preset = name } }))
      assert.are.same(want, preset_of(r), name)
      -- the fields outside the presets keep their defaults
      assert.are.same({ "f32", "f32", 128, false, "balanced", false, 4, 0.8, 0.5 }, { r.sync.codec,
        r.sync.codec_down, r.sync.block, r.sync.error_feedback, r.sync.plan, r.sync.split_rows, r.sync.ring,
        r.sync.grace_gamma, r.sync.ema }, name)
      assert.are.same({ "^wte%.", "^wpe%.", "emb" }, r.sync.embeddings)
      assert.is_nil(r.sync.schedule)
      assert.is_nil(r.sync.grace_s)
    end
    assert.are.equal("decoupled", assert(diloco.recipe.validate(tiny())).sync.preset)
  end)

  it("come from core/run.c: machine.preset names a bad preset and what is expected", function()
    assert.are.equal(24, diloco.machine.preset("streaming")["sync.H"])
    local ok, err = pcall(diloco.machine.preset, "fast")
    assert.is_false(ok)
    assert.matches('sync.preset = "fast": expected dp, diloco, streaming or decoupled', tostring(err), 1, true)
    assert.is_false((pcall(diloco.machine.preset)))
  end)

  it("lets a field of the recipe or of --set win over the preset", function()
    local r = assert(diloco.recipe.validate(tiny { sync = { preset = "streaming", alpha = 0.25, H = 48 } }))
    assert.are.same({ 48, 4, 2, "all", "off", "uniform", "mean", 0.25, false }, preset_of(r))
    r = tiny { sync = { preset = "decoupled", merge = "mean" } }
    diloco.recipe.set(r, "sync.preset=diloco")
    diloco.recipe.set(r, "sync.H=96")
    diloco.recipe.set(r, "sync.fragments=2") -- diloco with fragments is the user's choice
    r = assert(diloco.recipe.validate(r))
    assert.are.same({ 96, 2, 0, "all", "off", "uniform", "mean", 0, true }, preset_of(r))
    -- --set on a recipe without a sync section
    r = tiny()
    diloco.recipe.set(r, "sync.preset=dp")
    diloco.recipe.set(r, "sync.blocking=false")
    r = assert(diloco.recipe.validate(r))
    assert.are.same({ 1, 1, 0, "all", "off", "uniform", "mean", 0, false }, preset_of(r))
  end)

  it("takes quorum as an integer, \"all\" or a function, and grace as a duration in grace_s", function()
    local f = function(live) return live // 2 end
    local r = assert(diloco.recipe.validate(tiny { islands = { count = 4 }, sync = { quorum = f, grace = "250ms" } }))
    assert.are.equal(f, r.sync.quorum)
    assert.are.equal(0.25, r.sync.grace_s)
    r = assert(diloco.recipe.validate(tiny { islands = { count = 4 }, sync = { quorum = 4.0, grace = 3 } }))
    assert.are.equal(math.tointeger(4), r.sync.quorum)
    assert.are.equal("integer", math.type(r.sync.quorum))
    assert.are.equal(3.0, r.sync.grace_s)
    local sched = function(learner, step, fragments) return { 1 } end
    r = assert(diloco.recipe.validate(tiny { sync = { schedule = sched, embeddings = { "^tok" } } }))
    assert.are.equal(sched, r.sync.schedule)
    assert.are.same({ "^tok" }, r.sync.embeddings)
  end)
end)

describe("multi-island checks name the field, the value and what is expected", function()
  local function problems(t)
    local ok, errs = diloco.recipe.validate(tiny(t))
    if ok then return "" end
    return table.concat(errs, "\n")
  end
  local cases = {
    { { islands = { count = 4 }, sync = { quorum = 5 } },
      "sync.quorum = 5 but islands.count = 4: quorum must be <= the number of learners" },
    { { sync = { quorum = 0 } }, 'sync.quorum = 0: expected an integer >= 1, "all" (every live learner) or a function' },
    { { sync = { quorum = "most" } }, 'sync.quorum = "most": expected an integer >= 1, "all"' },
    { { sync = { H = 8, tau = 8 } }, "sync.tau = 8: the overlap must be below sync.H = 8" },
    { { sync = { preset = "streaming", tau = 30 } }, "sync.tau = 30: the overlap must be below sync.H = 24" },
    { { sync = { alpha = 1.01 } }, "sync.alpha = 1.01: expected a finite number in [0, 1]" },
    { { sync = { alpha = -0.5 } }, "sync.alpha = -0.5: expected a finite number in [0, 1]" },
    { { sync = { preset = "dp", fragments = 4 } },
      'sync.fragments = 4: expected 1 with sync.preset = "dp" (data parallel exchanges the whole gradient' },
    { { sync = { blocking = "yes" } }, 'sync.blocking = "yes": expected boolean' },
    { { sync = { grace_gamma = 0 } }, "sync.grace_gamma = 0: expected a finite number in (0, 1]" },
    { { sync = { ema = 1.5 } }, "sync.ema = 1.5: expected a finite number in (0, 1]" },
    { { sync = { schedule = { 1, 2 } } }, "sync.schedule = {1, 2}: expected function" },
    { { sync = { embeddings = { "[wte" } } }, 'sync.embeddings = {"[wte"}: expected a list of Lua patterns, item 1' },
    { { islands = { count = 65 } }, "islands.count = 65: expected an integer in [1, 64]" },
    { { islands = { count = 2, speed = 0 } }, "islands.speed = 0: expected a finite number > 0 (relative speed)" },
    { { islands = { count = 2, speed = { 1, -1 } } },
      "islands.speed[2] = -1: expected a finite number > 0 (relative speed)" },
    { { islands = { { speed = 1 }, { speed = 0 } } }, "islands[2].speed = 0: expected a finite number > 0 (relative speed)" },
    { { islands = { count = 3, { speed = 1 }, { speed = 0.5 } } },
      "islands.count = 3 but islands lists 2 island tables: expected count = 2 (or no count: a list fixes it)" },
    { { islands = { { bandwidth = "fast" } } },
      'islands[1].bandwidth = "fast": expected a rate > 0 such as "10Gbps", "2.5Gbps", "100Mbps", "1MB/s"' },
    { { islands = { count = 2, bandwidth = "10 Gbit" } }, 'islands.bandwidth = "10 Gbit": expected a rate > 0' },
    { { islands = { count = 2, bandwidth = 0 } }, "islands.bandwidth = 0: expected a rate > 0" },
    { { islands = { { latency = "50 msec" } } },
      'islands[1].latency = "50 msec": expected a duration such as "20s", "250ms", "5m", "1.5h"' },
    { { islands = { count = 2, step_time = "0s" } }, 'islands.step_time = "0s": expected a duration > 0' },
    { { islands = { { shard = 3 }, {} } }, "islands[1].shard = 3: expected a data shard in [1, 2] (islands.count = 2)" },
    { { islands = { { batch = 0 } } }, "islands[1].batch = 0: expected an integer in [1, 1000000]" },
    { { islands = { { ranks = 0 } } }, "islands[1].ranks = 0: expected an integer in [1, 4096]" },
    { { islands = { count = 2, ranks = 1.5 } }, "islands.ranks = 1.5: expected integer" },
    { { islands = { { ranks = 2 }, {} }, chaos = { { at = "1s", kill = 1, rank = -1 } } },
      "chaos[1].rank = -1: expected an MPI rank >= 0 of the island (0 is its learner)" },
    { { islands = { { ranks = 2 }, {} }, chaos = { { at = "1s", pause = 1, rank = 1 } } },
      "chaos[1].rank: unknown field for a pause event" },
    { { islands = { { sped = 2 } } }, "islands[1].sped: unknown field (allowed: bandwidth, batch, latency, ranks, shard, speed)" },
    { { islands = { "fast" } }, 'islands[1] = "fast": expected an island table {speed, batch, shard, latency, bandwidth}' },
    { { islands = { { speed = 1 }, speed = { 1 } } }, "islands.speed = {1}: expected a number (the default of every island)" },
    { { hooks = { on_merge = "print" } }, 'hooks.on_merge = "print": expected function' },
    { { hooks = { on_fault = 1 } }, "hooks.on_fault = 1: expected function" },
  }
  for _, c in ipairs(cases) do
    it(c[2], function() assert.matches(c[2], problems(c[1]), 1, true) end)
  end

  it("checks the fragments against the model once it is built", function()
    local r = assert(diloco.recipe.validate(tiny { sync = { fragments = 60 } }))
    assert.are.equal("sync.fragments = 60 but the model has 48 tensors: expected at most 48 "
      .. "(or sync.split_rows = true)", diloco.recipe.check_fragments(r, 48))
    assert.is_nil(diloco.recipe.check_fragments(r, 60))
    r = assert(diloco.recipe.validate(tiny { sync = { fragments = 60, split_rows = true } }))
    assert.is_nil(diloco.recipe.check_fragments(r, 48))
  end)
end)

describe("the islands section", function()
  it("normalizes the count form to a list of island tables", function()
    local r = assert(diloco.recipe.validate(tiny()))
    assert.are.same({ count = 1, step_time = 1.0, links = false, -- no link given: the runtime shapes none
      list = { { speed = 1, batch = 2, shard = 1, latency = 0.02, bandwidth = 312500000 } } }, r.islands)
    r = tiny()
    diloco.recipe.set(r, "islands.count=4")
    diloco.recipe.set(r, "islands.speed={1, 1, 0.5, 0.5}")
    r = assert(diloco.recipe.validate(r))
    assert.are.equal(4, r.islands.count)
    assert.are.equal(4, #r.islands.list)
    for i, s in ipairs { 1, 1, 0.5, 0.5 } do
      assert.are.same({ speed = s, batch = 2, shard = i, latency = 0.02, bandwidth = 312500000 }, r.islands.list[i])
    end
    r = assert(diloco.recipe.validate(tiny { islands = { count = 3, speed = 0.5, batch = 4 } }))
    assert.are.same({ speed = 0.5, batch = 4, shard = 3, latency = 0.02, bandwidth = 312500000 }, r.islands.list[3])
  end)

  it("takes a list of island tables with defaults at the top", function()
    local r = assert(diloco.recipe.validate(tiny { islands = {
      { speed = 1 },
      { speed = 0.5, batch = 8, shard = 1, latency = "50ms", bandwidth = "1Gbps" },
      {},
      { bandwidth = "inf", latency = 0 },
      step_time = "2s", latency = "20ms", bandwidth = "10Gbps",
    } }))
    local I = r.islands
    assert.are.equal(4, I.count)
    assert.are.equal(2.0, I.step_time)
    assert.are.same({ speed = 1, batch = 2, shard = 1, latency = 0.02, bandwidth = 1.25e9 }, I.list[1])
    assert.are.same({ speed = 0.5, batch = 8, shard = 1, latency = 0.05, bandwidth = 1.25e8 }, I.list[2])
    assert.are.same({ speed = 1, batch = 2, shard = 3, latency = 0.02, bandwidth = 1.25e9 }, I.list[3])
    assert.are.same({ speed = 1, batch = 2, shard = 4, latency = 0.0, bandwidth = math.huge }, I.list[4])
    -- plain data for OUT/recipe.json (math.huge becomes "inf"); the same count is fine
    local json = diloco.json_encode(diloco.recipe_json.effective(I), { sort_keys = true })
    assert.matches('"bandwidth":"inf"', json, 1, true)
    assert.is_truthy(diloco.recipe.validate(tiny { islands = { count = 2, {}, {} } }))
    -- the normalized form validates again to itself
    local again = assert(diloco.recipe.validate(tiny { islands = I }))
    assert.are.same(I, again.islands)
  end)

  it("parses rates and durations", function()
    local rate, dur = diloco.recipe.parse_rate, diloco.recipe.parse_duration
    assert.are.equal(1.25e9, rate("10Gbps"))
    assert.are.equal(312500000, rate("2.5Gbps"))
    assert.are.equal(12500000, rate("100Mbps"))
    assert.are.equal(1e6, rate("1MB/s"))
    assert.are.equal(5e5, rate("500kB/s"))
    assert.are.equal(math.huge, rate("inf"))
    assert.are.equal(math.huge, rate(math.huge))
    assert.are.equal(1000, rate(1000))
    assert.is_nil(rate("fast"))
    assert.is_nil(rate(0))
    assert.is_nil(rate("0Gbps"))
    assert.are.equal(365 * 86400, dur("1y"))
    assert.are.equal(250e-6, dur("250us"))
    assert.are.equal(0.05, dur("50ms"))
    assert.is_nil(dur("50 msec"))
  end)
end)

describe("the chaos section", function()
  local function problems(chaos, count)
    local ok, errs = diloco.recipe.validate(tiny { islands = { count = count or 4 }, chaos = chaos })
    if ok then return "" end
    return table.concat(errs, "\n")
  end

  it("normalizes scripted events, sorted by time, and a random policy", function()
    local r = assert(diloco.recipe.validate(tiny { seed = 9, islands = { count = 4 }, chaos = {
      { at = "50s", syncer = "down", down = "8s" },
      { at = "20s", kill = 2, down = "10s" },
      { at = "30s", slow = 1, factor = 3, duration = "15s" },
      { at = "20s", cut = 3 },
      random = { mtbf = "1h", down = "2m", learners = { 1, 4 } },
    } }))
    assert.are.same({ seed = 9, events = {
      { at = 20, kind = "kill", learner = 2, duration = 10 },
      { at = 20, kind = "cut", learner = 3, duration = math.huge },
      { at = 30, kind = "slow", learner = 1, duration = 15, factor = 3 },
      { at = 50, kind = "syncer", duration = 8 },
    }, random = { mtbf = 3600, down = 120, learners = { 1, 4 }, exponential_down = false } }, r.chaos)
    -- the normalized form validates again to itself
    local again = assert(diloco.recipe.validate(tiny { seed = 9, islands = { count = 4 }, chaos = r.chaos }))
    assert.are.same(r.chaos, again.chaos)
    r = assert(diloco.recipe.validate(tiny { seed = 5, islands = { count = 3 },
      chaos = { random = { mtbf = 60, down = 5, exponential_down = true } } }))
    assert.are.same({ seed = 5, events = {}, random = { mtbf = 60, down = 5, learners = { 1, 2, 3 },
      exponential_down = true } }, r.chaos)
    -- fine on one island too: `run` refuses it, `sim` runs it
    assert.is_truthy(diloco.recipe.validate(tiny { chaos = { { at = 1, kill = 1 } } }))
    assert.is_nil(assert(diloco.recipe.validate(tiny())).chaos)
  end)

  it("builds chaos tables with diloco.chaos", function()
    local C = diloco.chaos
    local t = C.timeline { { at = "20s", kill = 2, down = "10s" }, { at = "5s", slow = 1, factor = 2 } }
    assert.are.same({ { at = "20s", kill = 2, down = "10s" }, { at = "5s", slow = 1, factor = 2 } }, t)
    local p = C.poisson { mtbf = "60s", down = "15s", learners = { 2 }, seed = 4 }
    assert.are.same({ random = { mtbf = "60s", down = "15s", learners = { 2 } }, seed = 4 }, p)
    local c = C.combine(t, p)
    assert.are.same({ t[1], t[2], random = p.random, seed = 4 }, c)
    local r = assert(diloco.recipe.validate(tiny { islands = { count = 2 }, chaos = c }))
    assert.are.same({ 5, 20 }, { r.chaos.events[1].at, r.chaos.events[2].at })
    assert.are.equal(4, r.chaos.seed)
    assert.matches("more than one random policy", H.error_of(C.combine, p, p), 1, true)
    assert.matches("unknown option mtfb", H.error_of(C.poisson, { mtfb = 1 }), 1, true)
    assert.matches("item 2 is a number", H.error_of(C.timeline, { {}, 3 }), 1, true)
  end)

  local cases = {
    { { { at = "20s", kill = 5 } }, "chaos[1].kill = 5: expected a learner index in [1, 4] (islands.count = 4)" },
    { { { at = "1s", slow = 1, factor = 2 }, { at = "2s", cut = 0 } },
      "chaos[2].cut = 0: expected a learner index in [1, 4] (islands.count = 4)" },
    { { { at = "20s", kill = 2, cut = 3 } },
      "chaos[1] has kill = 2 and cut = 3: expected exactly one of kill, pause, slow, cut, syncer, link per event" },
    { { { at = "20s" } },
      "chaos[1] names no fault: expected exactly one of kill, pause, slow, cut, syncer, link per event" },
    { { { at = "20 secs", kill = 1 } },
      'chaos[1].at = "20 secs": expected a duration such as "20s", "250ms", "5m", "1.5h"' },
    { { { kill = 1 } }, "chaos[1].at: missing (when it happens" },
    { { { at = "1s", kill = 1, down = "soon" } }, 'chaos[1].down = "soon": expected a duration such as' },
    { { { at = "1s", slow = 1 } }, "chaos[1].factor: missing (a slow event multiplies the learner's step time by it)" },
    { { { at = "1s", slow = 1, factor = 0 } }, "chaos[1].factor = 0: expected a finite number > 0" },
    { { { at = "1s", slow = 1, factor = math.huge } }, "chaos[1].factor = inf: expected a finite number > 0" },
    { { { at = "1s", slow = 1, factor = 2, down = "1s" } },
      "chaos[1].down: unknown field for a slow event (allowed: at, duration, factor, slow)" },
    { { { at = "1s", syncer = "up" } }, 'chaos[1].syncer = "up": expected "down"' },
    { { 42 }, "chaos[1] = 42: expected an event table such as" },
    { { mtbf = "30s" }, "chaos.mtbf: unknown field (allowed: random, seed, and scripted events" },
    { { random = { mtbf = "0s", down = "1s" } }, 'chaos.random.mtbf = "0s": expected a duration > 0' },
    { { random = { down = "1s" } }, "chaos.random.mtbf: missing" },
    { { random = { mtbf = "1m" } }, "chaos.random.down: missing" },
    { { random = { mtbf = "1m", down = "1s", learners = { 1, 7 } } },
      "chaos.random.learners[2] = 7: expected a learner index in [1, 4] (islands.count = 4)" },
    { { seed = -1 }, "chaos.seed = -1: expected an integer >= 0" },
    { "often", 'chaos = "often": expected table' },
  }
  for _, c in ipairs(cases) do
    it(c[2], function() assert.matches(c[2], problems(c[1]), 1, true) end)
  end
end)

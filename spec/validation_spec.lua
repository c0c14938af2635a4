-- Hostile input to `diloco-lua run` and `sample` (issue 7, "Validation never crashes,
-- and bounds what it allocates"): every bad recipe value, option or model file gets a
-- message naming the field and what is allowed, exit 2 (bad options) or 1 (a bad
-- file), never a Lua traceback or an internal file:line; nothing is allocated beyond
-- the machine's memory on the strength of a number in a recipe or a file.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")

local function q(s) -- single-quote for /bin/sh
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local H = require "spec.helpers"
local sh, read_lines = H.sh, H.read_lines
local scratch = H.scratch()
local tmp, write = scratch.dir, scratch.write

local TINY = write("tiny.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  steps = 2, eval = { every = 0, batches = 1 },
}
]])

-- `run` of the tiny recipe with flags (a shell fragment); it must fail validation.
local function run(flags)
  return sh(string.format("%s run %s --out %s/out --quiet %s", exe, TINY, tmp, flags))
end

-- No Lua traceback and no position in our own code.
local function assert_clean(out)
  assert.is_nil(out:find("stack traceback", 1, true), out)
  assert.is_nil(out:find("%.lua:%d+:"), out)
end

local function assert_refused(flags, want, code)
  local out, status = run(flags)
  assert.are.equal(code or 2, status, flags .. "\n" .. out)
  assert.matches(want, out, 1, true)
  assert_clean(out)
  return out
end

describe("diloco-lua option parsing", function()
  it("refuses a value given to a flag", function()
    assert_refused("--quiet=yes", "option '--quiet' takes no value (got '--quiet=yes')")
  end)
  it("prints a traceback only with --debug", function()
    -- a hook that fails with a plain Lua error: an internal error, not a recipe problem
    local path = write("boom.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  steps = 2, eval = { every = 0, batches = 1 },
  hooks = { on_step = function() local t = nil; return t.x end },
}
]])
    local out, status = sh(string.format("%s run %s --out %s/boom --quiet", exe, path, tmp))
    assert.are.equal(1, status, out)
    assert.is_nil(out:find("stack traceback", 1, true), out)
    local dout, dstatus = sh(string.format("%s run %s --out %s/boom2 --quiet --debug", exe, path, tmp))
    assert.are.equal(1, dstatus, dout)
    assert.matches("stack traceback", dout, 1, true)
  end)
end)

describe("diloco-lua sample options", function()
  it("refuses an empty prompt before reading the file", function()
    local out, status = sh(exe .. " sample " .. tmp .. "/none.safetensors --prompt ''")
    assert.are.equal(2, status, out)
    assert.matches('--prompt "": expected a non-empty text', out, 1, true)
    assert_clean(out)
  end)
end)

describe("diloco-lua run refuses a bad recipe value, naming the field (exit 2)", function()
  local cases = {
    { "--set model.ctx=abc", 'model: GPT: ctx = "abc" (a string): expected a positive integer' },
    { "--set .=1", "--set .=1: malformed key '.': expected field names joined by single dots" },
    { "--set .steps=5", "--set .steps=5: malformed key '.steps'" },
    { "--set steps..=5", "--set steps..=5: malformed key 'steps..'" },
    { "--set model.vocab=3", "model.vocab = 3: expected 256 (text data is byte-level" },
    { "--set inner.eps=0", "inner.eps = 0: expected a finite number in (0, 1]" },
    { "--set inner.lr=1e400", "inner.lr = 1e400: expected a finite number >= 0" }, -- as written
    { "--set inner.min_lr=0.5 --set inner.lr=0.1", "inner.min_lr = 0.5 is above inner.lr = 0.1" },
    { "--set \"inner.no_decay={'bias', '[a'}\"",
      "inner.no_decay = {\"bias\", \"[a\"}: expected a list of Lua patterns, item 2 (\"[a\") is malformed" },
    { "--set inner.kind=nesterov --set inner.momentum=0", "inner.momentum = 0: nesterov needs momentum > 0" },
    { "--set data.bacth=64", 'data.bacth: unknown field for data.kind = "synthetic_text" (allowed: batch, bytes,' },
    { "--set inner=5", "inner = 5: expected table (inner optimizer" },
    { "--set model.heads=3", "model: GPT: heads = 3 does not divide dim = 16" },
    { "--set model.moe={experts=2,top_k=3}", "model: GPT: moe.top_k = 3 exceeds moe.experts = 2" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function() assert_refused(c[1], c[2]) end)
  end

  it("says what a section is when a section has the wrong type, never an empty ()", function()
    local out = assert_refused("--set eval=1", "eval = 1: expected table (held-out evaluation)")
    assert.is_nil(out:find("()", 1, true), out)
  end)

  it("refuses NaN in a number field", function()
    local path = write("nan.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  inner = { clip = 0/0 }, steps = 2,
}
]])
    local out, status = sh(string.format("%s run %s --out %s/nan --quiet", exe, path, tmp))
    assert.are.equal(2, status, out)
    assert.matches("inner.clip = [-]?nan: expected a finite number >= 0", out)
  end)
end)

describe("diloco-lua run checks multi-island fields and points to sim (exit 2)", function()
  local cases = {
    { "--set islands.count=4 --set sync.quorum=5",
      "sync.quorum = 5 but islands.count = 4: quorum must be <= the number of learners" },
    { "--set sync.tau=24", "sync.tau = 24: the overlap must be below sync.H = 24" },
    { "--set sync.preset=streaming --set sync.H=2", "sync.tau = 2: the overlap must be below sync.H = 2" },
    { "--set sync.alpha=1.5", "sync.alpha = 1.5: expected a finite number in [0, 1]" },
    { "--set sync.preset=dp --set sync.fragments=2", 'sync.fragments = 2: expected 1 with sync.preset = "dp"' },
    { "--set islands.count=2 --set islands.speed=0", "islands.speed = 0: expected a finite number > 0 (relative speed)" },
    { "--set islands.count=2 --set islands.speed={1,-2}",
      "islands.speed[2] = -2: expected a finite number > 0 (relative speed)" },
    { "--set islands.count=3 --set islands.list={{},{}}",
      "islands.count = 3 but islands lists 2 island tables: expected count = 2" },
    { "--set islands.bandwidth=fast", 'islands.bandwidth = "fast": expected a rate > 0 such as "10Gbps"' },
    { "--set islands.latency=5parsecs", 'islands.latency = "5parsecs": expected a duration such as "20s"' },
    { "--set sync.grace=soon", 'sync.grace = "soon": expected adaptive, off, or a duration' },
    { "--set islands.count=65", "islands.count = 65: expected an integer in [1, 64]" },
    { "--set runtime.heartbeat=5s --set runtime.timeout=2s",
      "runtime.heartbeat = 5s >= runtime.timeout = 2s: expected heartbeat < timeout" },
    { "--set runtime.timeout=soon", 'runtime.timeout = "soon": expected a duration such as "20s"' },
    { "--set runtime.restarts=-1", "runtime.restarts = -1: expected an integer in [0, 1000000]" },
    { "--set runtime.elastic=1", "runtime.elastic = 1: expected boolean" },
    { "--set runtime.codec_thread=yes", 'runtime.codec_thread = "yes": expected boolean' },
    { "--set runtime.syncer_every=1.5", "runtime.syncer_every = 1.5: expected integer" },
    { "--set runtime.start_timeout=-1s", 'runtime.start_timeout = "-1s": expected a duration such as "20s"' },
    { "--set runtime.refusals=0", 'runtime.refusals = 0: expected a duration > 0' },
    { "--set runtime.refusals=often", 'runtime.refusals = "often": expected a duration such as "20s"' },
  }
  for _, c in ipairs(cases) do
    it(c[1], function() assert_refused(c[1], c[2]) end)
  end

  local function recipe(name, extra)
    return write(name, [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 5000, ctx = 16, batch = 2 },
  steps = 2, eval = { every = 0, batches = 1 },
]] .. extra .. "\n}\n")
  end
  local function refused(path, flags, want)
    local out, status = sh(string.format("%s run %s --out %s/multi --quiet %s", exe, path, tmp, flags or ""))
    assert.are.equal(2, status, out)
    assert.matches(want, out, 1, true)
    assert_clean(out)
    return out
  end

  it("names a chaos event's learner that does not exist, two kinds, a malformed duration", function()
    local path = recipe("chaos_bad.lua", [[
  islands = { count = 4 },
  chaos = diloco.chaos.timeline {
    { at = "20s", kill = 5, down = "10s" },
    { at = "30s", kill = 1, slow = 2, factor = 3 },
    { at = "40 sec", cut = 3 },
  },]])
    local out = refused(path, "", "chaos[1].kill = 5: expected a learner index in [1, 4] (islands.count = 4)")
    assert.matches("chaos[2] has kill = 1 and slow = 2: expected exactly one of kill, pause, slow, cut, syncer", out, 1, true)
    assert.matches('chaos[3].at = "40 sec": expected a duration such as "20s"', out, 1, true)
    assert.matches("3 problems in the recipe", out, 1, true)
  end)

  it("names a malformed bandwidth and a speed <= 0 in an island table", function()
    local path = recipe("islands_bad.lua", [[
  islands = { { speed = 1 }, { speed = 0, bandwidth = "1 gigabit" } },]])
    local out = refused(path, "", "islands[2].speed = 0: expected a finite number > 0 (relative speed)")
    assert.matches('islands[2].bandwidth = "1 gigabit": expected a rate > 0', out, 1, true)
  end)

  it("refuses a --set of an islands field that the recipe's island tables set for themselves, naming them", function()
    local path = write("islands_list.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 },
  data = diloco.data.text { path = "/usr/share/games/fortunes", ctx = 16, batch = 2 },
  steps = 2, eval = { every = 0, batches = 1 },
  islands = { { speed = 1 }, { speed = 2, batch = 4 } },
}
]])
    local out = refused(path, "--set islands.speed=3 --set islands.batch=8",
      "--set islands.speed: islands[1], islands[2] set their own speed in the recipe's list of island tables, "
      .. "which wins over islands.speed")
    assert.matches("--set islands.batch: islands[2] sets its own batch", out, 1, true)
    -- a field no island table sets is every island's default: taken
    local status
    out, status = sh(string.format("%s sim %s --out %s/lat --quiet --set islands.latency=0.5", exe, path, tmp))
    assert.are.equal(0, status, out)
  end)

  it("runs several islands as processes, resuming one only from its syncer's checkpoints", function()
    local out = assert_refused("--set islands.count=4 --resume latest",
      "/syncer holds no checkpoint (checkpoint-STEP.safetensors) to resume from")
    assert.is_nil(out:find("problem", 1, true), out)
    assert.is_nil(out:find("trains one island", 1, true), out)
  end)

  it("refuses chaos on one island, pointing to sim", function()
    local path = recipe("chaos_one.lua", [[
  chaos = diloco.chaos.poisson { mtbf = "60s", down = "15s" },]])
    refused(path, "", "chaos: 0 scripted events and a random policy: `diloco-lua run` trains one island without "
      .. "faults; inject them on several islands")
  end)

  it("says so in --help", function()
    local out, status = sh(exe .. " run --help")
    assert.are.equal(0, status, out)
    assert.matches("diloco-lua sim RECIPE", out, 1, true)
    assert.matches("learner processes", out, 1, true)
  end)
end)

describe("diloco-lua run checks an image classifier against its data", function()
  local IMG = write("img.lua", [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "mlp", input = 784, hidden = { 8 }, classes = 4 },
  data = diloco.data.synthetic_images { count = 40, classes = 4, batch = 4 },
  steps = 2, eval = { every = 0, batches = 1 },
}
]])
  local function img(flags) return sh(string.format("%s run %s --out %s/img --quiet %s", exe, IMG, tmp, flags)) end
  local cases = {
    { "--set model.input=100", "model.input = 100 but the data's images have 784 values (synthetic_images)" },
    { "--set data.classes=300", "data.classes = 300: expected an integer in [2, 256]" },
    { "--set data.classes=5", "model.classes = 4 but data.classes = 5" },
    { "--set data.kind=fashion --set data.count=nil --set model.classes=11 --set data.classes=11",
      "data.classes = 11: Fashion-MNIST has 10 classes" },
    { "--set model.arch=vit --set model.input=nil --set model.hidden=nil --set model.image=32 --set model.patch=8",
      "model.channels * model.image^2 = 1024 but the data's images have 784 values" },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local out, status = img(c[1])
      assert.are.equal(2, status, out)
      assert.matches(c[2], out, 1, true)
      assert_clean(out)
    end)
  end
  it("still trains when they match", function()
    local out, status = img("")
    assert.are.equal(0, status, out)
  end)
end)

describe("the memory bound", function()
  it("refuses a model too large for the machine, with the estimate", function()
    local out = assert_refused("--set model.layers=1e9", "memory: the model and its training step would need about")
    assert.matches("parameters", out, 1, true)
    assert.matches("more than this machine's", out, 1, true)
  end)
  it("refuses a batch whose activations do not fit", function()
    assert_refused("--set data.batch=1000000", "activations: ")
  end)

  local est, nn = diloco.estimate, diloco.nn
  it("counts the parameters of every architecture exactly", function()
    for _, c in ipairs {
      { "gpt", {} },
      { "gpt", { vocab = 256, ctx = 16, dim = 32, layers = 3, heads = 4, tied = false, norm = "rmsnorm" } },
      { "gpt", { dim = 32, heads = 2, layers = 2, moe = { experts = 3, top_k = 2 }, mlp_ratio = 3 } },
      { "gpt", { dim = 24, heads = 3, layers = 1, moe = { experts = 2, top_k = 1 }, mlp_ratio = 1.5, vocab = 100 } },
      { "vit", {} },
      { "vit", { image = 8, patch = 2, channels = 3, dim = 16, heads = 2, layers = 1, classes = 5, norm = "rmsnorm" } },
      { "mlp", {} },
      { "mlp", { input = 20, hidden = { 7, 5, 3 }, classes = 4 } },
      { "mlp", { input = 20, hidden = {}, classes = 4 } },
    } do
      local o = nn.model_options(c[1], c[2])
      assert.are.equal(nn.ARCHS[c[1]](c[2]):num_params(), est.params(c[1], o), c[1])
    end
  end)

  it("estimates without allocating, however large the options", function()
    local o = nn.model_options("gpt", { layers = 1e15, dim = 2 ^ 20, heads = 1 })
    local e = est.training("gpt", o, { batch = 1e6, ctx = 64 }, "adamw")
    assert.is_true(e.bytes > 1e30)
    assert.is_nil((est.check(e)))
  end)

  it("counts the optimizer's state: AdamW two moments, momentum SGD one", function()
    local o = nn.model_options("mlp", { input = 10, hidden = { 10 }, classes = 2 })
    local a = est.training("mlp", o, { batch = 1 }, "adamw")
    local s = est.training("mlp", o, { batch = 1 }, "sgd")
    assert.are.equal(o and est.params("mlp", o) * 4 * 4, a.param_bytes)
    assert.are.equal(est.params("mlp", o) * 4 * 3, s.param_bytes)
  end)

  it("is at least the peak resident set of a real training step", function()
    -- a step whose activations (~100 MB) dwarf the process itself
    local script = write("peak.lua", [[
local r = diloco.recipe { model = { arch = "gpt", ctx = 128, dim = 64, layers = 2, heads = 4 },
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 128, batch = 32 }, steps = 2,
  eval = { every = 0, batches = 1 } }
assert(diloco.recipe.validate(r))
local e = diloco.estimate.training("gpt", diloco.recipe.model_options(r.model), r.data, "adamw")
diloco.train.run(r, { out = ]] .. string.format("%q", tmp .. "/peak") .. [[, quiet = true })
local hwm = io.open("/proc/self/status"):read("a"):match("VmHWM:%s*(%d+)") * 1024
print(string.format("estimate %d peak %d", math.floor(e.bytes), hwm))
]])
    local out, status = sh(exe .. " " .. script)
    assert.are.equal(0, status, out)
    local e, peak = out:match("estimate (%d+) peak (%d+)")
    e, peak = tonumber(e), tonumber(peak)
    -- AddressSanitizer's shadow memory and redzones inflate the resident set, so under the
    -- sanitizers only the upper bound is checked (the release build checks both)
    if os.getenv("DILOCO_SANITIZED") ~= "1" then assert.is_true(e >= peak, out) end
    assert.is_true(e <= 3 * peak, out) -- and not wildly above it
  end)
end)

describe("diloco-lua sample checks the file before trusting it", function()
  local OPTS = { vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 }
  local function model_file(name, meta_model, edit)
    local m = diloco.nn.GPT(OPTS)
    local list = {}
    for _, p in ipairs(m:parameters()) do list[#list + 1] = { p[1], p[2] } end
    if edit then list = edit(list) or list end
    local path = tmp .. "/" .. name
    assert(diloco.save_safetensors(path, list, { ["diloco.model"] = diloco.json_encode(meta_model) }))
    return path
  end
  local function spec_with(over)
    local s = { arch = "gpt" }
    for k, v in pairs(OPTS) do s[k] = v end
    for k, v in pairs(over or {}) do s[k] = v end
    return s
  end
  local function sample(path)
    return sh(string.format("%s sample %s --tokens 3 --prompt ab", exe, path))
  end

  it("samples from a good file", function()
    local out, status = sample(model_file("good.safetensors", spec_with()))
    assert.are.equal(0, status, out)
    assert.are.equal("ab", out:sub(1, 2))
  end)
  it("estimates the model from its metadata and refuses one too large, before building it", function()
    local t0 = os.time()
    local out, status = sample(model_file("huge.safetensors", spec_with { layers = 1000000000 }))
    assert.are.equal(2, status, out)
    assert.matches("huge.safetensors: metadata diloco.model: the model would need about", out, 1, true)
    assert.matches("more than this machine's", out, 1, true)
    assert.is_true(os.time() - t0 < 5)
    assert_clean(out)
  end)
  it("validates the metadata's options as a recipe's model section", function()
    local out, status = sample(model_file("ctx.safetensors", spec_with { ctx = "abc" }))
    assert.are.equal(2, status, out)
    assert.matches('metadata diloco.model: model: GPT: ctx = "abc" (a string): expected a positive integer', out, 1,
      true)
    assert_clean(out)
    out, status = sample(model_file("vocab.safetensors", spec_with { vocab = 300 }))
    assert.are.equal(2, status, out)
    assert.matches("vocab = 300: sample needs a byte-level GPT (vocab 256)", out, 1, true)
  end)
  it("refuses a weight of the right size but the wrong shape", function()
    local path = model_file("transposed.safetensors", spec_with(), function(list)
      for _, p in ipairs(list) do
        if p[1] == "blocks.0.attn.qkv.weight" then p[2] = p[2]:transpose(1, 2):clone() end
      end
    end)
    local out, status = sample(path)
    assert.are.equal(1, status, out)
    assert.matches("tensor 'blocks.0.attn.qkv.weight' has shape [16, 48], the model described by its metadata "
      .. "needs [48, 16]", out, 1, true)
    assert_clean(out)
  end)
  it("refuses NaN and infinite weights", function()
    for _, v in ipairs { 0 / 0, math.huge } do
      local path = model_file("nan.safetensors", spec_with(), function(list)
        local w = list[1][2]:tolist()
        w[3][5] = v
        list[1][2] = diloco.tensor(w)
      end)
      local out, status = sample(path)
      assert.are.equal(1, status, out)
      assert.matches("tensor 'wte.weight' holds NaN or infinite values", out, 1, true)
    end
  end)
  it("refuses a missing and an extra tensor", function()
    local out, status = sample(model_file("missing.safetensors", spec_with(), function(list)
      table.remove(list)
    end))
    assert.are.equal(1, status, out)
    assert.matches("tensor 'ln_f.bias' of the model is missing from the file", out, 1, true)
    out, status = sample(model_file("extra.safetensors", spec_with(), function(list)
      list[#list + 1] = { "stray", diloco.zeros(2) }
    end))
    assert.are.equal(1, status, out)
    assert.matches("tensor 'stray' is not a parameter of the model", out, 1, true)
  end)
end)

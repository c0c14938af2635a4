-- `diloco-lua run` and `sample` end to end: recipe validation messages, CLI flag
-- errors, bad data files, a real (tiny) training run with metrics, resume, Ctrl-C.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")

local H = require "spec.helpers"
local sh, read_lines = H.sh, H.read_lines
local scratch = H.scratch()
local tmp, write = scratch.dir, scratch.write

local TINY = [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 16, batch = 4 },
  inner = diloco.optim.adamw { lr = 3e-3, warmup = 2 },
  steps = 30, eval = { every = 10, batches = 2 }, seed = 3,
  %s
}
]]

local function run(recipe_extra, flags)
  local path = write("r.lua", TINY:format(recipe_extra or ""))
  return sh(string.format("%s run %s --out %s/out %s", exe, path, tmp, flags or ""))
end


describe("diloco-lua run validates the recipe", function()
  it("reports every bad field with its value and what is allowed", function()
    local out, status = run("islands = { count = 0 }, inner2 = 1, eval = { every = -1 },")
    assert.are.equal(2, status)
    assert.matches("3 problems in the recipe", out, 1, true)
    assert.matches("islands.count = 0: expected an integer in [1, 64]", out, 1, true)
    assert.matches("inner2: unknown field (allowed:", out, 1, true)
    assert.matches("eval.every = -1: expected an integer in [0,", out, 1, true)
  end)
  it("names wrong types and choices", function()
    local out, status = run("log = { every = 'often' }, sync = { codec = 'int3' },")
    assert.are.equal(2, status)
    assert.matches('log.every = "often": expected integer', out, 1, true)
    assert.matches('sync.codec = "int3": expected one of f32, bf16, fp8, int8, int4, e3m0', out, 1, true)
  end)
  it("refuses fault injection in a single-island run, pointing to sim", function()
    local out, status = run("chaos = { { at = '1s', kill = 1 } },")
    assert.are.equal(2, status)
    assert.matches("chaos: 1 scripted event: `diloco-lua run` trains one island without faults; inject them on "
      .. "several islands", out, 1, true)
  end)
  it("checks fields against each other", function()
    local out, status = run("", "--set data.kind=synthetic_images --set data.bytes=nil --set data.ctx=nil")
    assert.are.equal(2, status)
    assert.matches('model.arch = "gpt" needs text data, data.kind is "synthetic_images"', out, 1, true)
  end)
  it("reports an error raised by the model constructor", function()
    local out, status = run("", "--set model.heads=3")
    assert.are.equal(2, status)
    assert.matches("model: .*heads", out)
  end)
end)

describe("diloco-lua run flags", function()
  it("rejects an unknown option with usage", function()
    local out, status = run("", "--frobnicate")
    assert.are.equal(2, status)
    assert.matches("run: unknown option '--frobnicate'", out, 1, true)
    assert.matches("usage: diloco-lua run RECIPE.lua", out, 1, true)
  end)
  it("rejects a malformed --set", function()
    local out, status = run("", "--set steps")
    assert.are.equal(2, status)
    assert.matches("--set steps: expected KEY=VALUE", out, 1, true)
  end)
  it("rejects --set of an unknown section", function()
    local out, status = run("", "--set nosuch.x=1")
    assert.are.equal(2, status)
    assert.matches("--set nosuch.x=1: unknown field nosuch", out, 1, true)
  end)
  it("rejects a missing recipe file", function()
    local out, status = sh(exe .. " run " .. tmp .. "/missing.lua")
    assert.are.equal(2, status)
    assert.matches("missing.lua", out, 1, true)
  end)
  it("names an output directory that cannot be created", function()
    local path = write("r.lua", TINY:format(""))
    local f = write("plainfile", "x")
    local out, status = sh(string.format("%s run %s --out %s/sub", exe, path, f))
    assert.are.equal(1, status)
    assert.matches("--out " .. f .. "/sub: " .. f .. " exists and is not a directory", out, 1, true)
  end)

  it("lists the recipe fields", function()
    local out, status = sh(exe .. " run --fields")
    assert.are.equal(0, status)
    assert.matches("inner.lr", out, 1, true)
    assert.matches("data.batch", out, 1, true)
  end)
end)

describe("diloco-lua run with bad data files", function()
  it("names a missing text path", function()
    local out, status = run("", "--set data.kind=text --set data.bytes=nil --set data.path=" .. tmp .. "/nope.txt")
    assert.are.equal(1, status)
    assert.matches("data: .*nope%.txt", out)
  end)
  it("writes a summary when it fails while it starts, and the next run takes the directory over", function()
    local path = write("nodata.lua", TINY:format(""))
    local o = tmp .. "/failed-start"
    local out, status = sh(string.format("%s run %s --out %s --set data.kind=text --set data.bytes=nil "
      .. "--set data.path=%s/nope.txt", exe, path, o, tmp))
    assert.are.equal(1, status, out)
    local lines = read_lines(o .. "/metrics.jsonl")
    assert.are.equal(1, #lines, table.concat(lines, "\n"))
    local s = assert(diloco.json_decode(lines[1]))
    assert.are.equal("summary", s.event)
    assert.are.equal("start", s.failed_at)
    assert.matches("nope%.txt", s.error)
    assert.are.equal(0, s.steps)
    out, status = sh(string.format("%s run %s --out %s --set steps=4 --set eval.every=0", exe, path, o))
    assert.are.equal(0, status, out)
    assert.matches("took over " .. o, out, 1, true)
  end)
  it("names a malformed IDX file", function()
    local bad = write("bad-images.idx", "not an idx file at all")
    local lbl = write("bad-labels.idx", "nor this")
    local path = write("img.lua", [[
local diloco = require "diloco"
return diloco.recipe { model = { arch = "mlp", input = 784, hidden = { 8 }, classes = 10 },
  data = diloco.data.images { images = "]] .. bad .. [[", labels = "]] .. lbl .. [[", batch = 4 }, steps = 2 }
]])
    local out, status = sh(string.format("%s run %s --out %s/img", exe, path, tmp))
    assert.are.equal(1, status)
    assert.matches("bad%-images%.idx", out)
  end)
end)

describe("a tiny training run", function()
  local metrics = tmp .. "/m.jsonl"
  it("trains, evaluates, writes metrics ending in the summary, and saves the model", function()
    local out, status = run("", "--metrics " .. metrics .. " --set steps=40")
    assert.are.equal(0, status, out)
    local lines = read_lines(metrics)
    local first, last = diloco.json_decode(lines[1]), diloco.json_decode(lines[#lines])
    assert.are.equal("step", first.event)
    assert.are.equal("summary", last.event)
    for _, k in ipairs { "preset", "learners", "steps", "tokens", "final_eval_loss", "goodput", "uptime",
      "bytes_up", "bytes_down", "wall_s" } do
      assert.is_not_nil(last[k], "summary field " .. k)
    end
    assert.are.equal(40, last.steps)
    assert.are.equal(40 * 4 * 16, last.tokens)
    assert.are.equal(diloco.gemm_backend(), last.gemm) -- same build, same environment
    assert.are.equal(1, last.threads)                   -- the specs run with OPENBLAS_NUM_THREADS=1
    assert.is_true(last.final_eval_loss < math.log(256), "the model learned something")
    -- the final eval on the whole split too: every window of the eval split once
    assert.is_true(last.final_eval_rows_all > 0 and last.final_eval_loss_all < math.log(256))
    local evals = 0
    for _, l in ipairs(lines) do
      if diloco.json_decode(l).event == "eval" then evals = evals + 1 end
    end
    assert.are.equal(4, evals) -- steps 10, 20, 30 and the final one
    local t = diloco.load_safetensors(tmp .. "/out/model.safetensors")
    assert.is_truthy(t and t["wte.weight"])
  end)

  it("takes its thread count from the recipe and its gemm backend from DILOCO_GEMM", function()
    local m = tmp .. "/threads.jsonl"
    local path = write("r.lua", TINY:format(""))
    local out, status = sh(string.format("DILOCO_GEMM=openblas %s run %s --out %s/thr --set steps=3 "
      .. "--set threads=2 --metrics %s", exe, path, tmp, m))
    assert.are.equal(0, status, out)
    local last = diloco.json_decode(read_lines(m)[#read_lines(m)])
    assert.are.equal(2, last.threads)
    assert.are.equal("openblas", last.gemm)
  end)

  it("resumes from the checkpoint and continues the step count", function()
    local m2 = tmp .. "/m2.jsonl"
    local out, status = run("", "--set steps=60 --metrics " .. m2 .. " --resume latest")
    assert.are.equal(0, status, out)
    local lines = read_lines(m2)
    local first, second, last = diloco.json_decode(lines[1]), diloco.json_decode(lines[2]),
      diloco.json_decode(lines[#lines])
    assert.are.equal("resume", first.event)
    assert.are.equal(40, first.step)
    assert.are.equal("step", second.event)
    assert.is_true(second.step > 40)
    assert.are.equal(60, last.steps)
    assert.are.equal(60 * 4 * 16, last.tokens)
  end)

  it("continues exactly: 20 + resume 20 equals 40 straight", function()
    local a, b = tmp .. "/a.jsonl", tmp .. "/b.jsonl"
    run("", "--set steps=40 --set inner.schedule=constant --metrics " .. a .. " --out " .. tmp .. "/straight")
    local straight = diloco.json_decode(read_lines(a)[#read_lines(a)])
    run("", "--set steps=20 --set inner.schedule=constant --out " .. tmp .. "/half --metrics " .. b)
    run("", "--set steps=40 --set inner.schedule=constant --metrics " .. b .. " --out " .. tmp ..
      "/half --resume latest")
    local resumed = diloco.json_decode(read_lines(b)[#read_lines(b)])
    assert.are.equal(straight.final_eval_loss, resumed.final_eval_loss)
  end)

  it("ends the metrics with a summary naming the error when training diverges", function()
    local m = tmp .. "/nan.jsonl"
    local out, status = run("", "--set inner.lr=1e6 --set inner.clip=0 --metrics " .. m .. " --out " .. tmp .. "/nan")
    assert.are.equal(1, status)
    assert.matches("step %d+: training diverged %(loss [^,]+, gradient norm [^)]+%), the update was not applied; "
      .. "lower inner.lr", out)
    local lines = read_lines(m)
    local last = diloco.json_decode(lines[#lines])
    assert.are.equal("summary", last.event)
    assert.matches("training diverged", last.error)
  end)

  it("samples text from the trained model", function()
    local out, status = sh(exe .. " sample " .. tmp .. "/out/model.safetensors --prompt 'ab' --tokens 20 --seed 1")
    assert.are.equal(0, status, out)
    assert.is_true(#out >= 22)
    assert.are.equal("ab", out:sub(1, 2))
  end)

  it("names a bad sample option and what is allowed", function()
    local model = tmp .. "/out/model.safetensors"
    for flag, want in pairs {
      ["--tokens 0"] = "--tokens 0: expected an integer in [1,",
      ["--temperature -1"] = "--temperature -1: expected a number in [0,",
      ["--top-k 300"] = "--top-k 300: expected an integer in [1, 256]",
      ["--bogus 1"] = "unknown option '--bogus'",
    } do
      local out, status = sh(exe .. " sample " .. model .. " " .. flag)
      assert.are.equal(2, status, flag)
      assert.matches(want, out, 1, true)
    end
  end)

  it("refuses to sample from a file that is not a model", function()
    local bad = write("bad.safetensors", "garbage")
    local out, status = sh(exe .. " sample " .. bad)
    assert.are.equal(1, status)
    assert.matches("bad%.safetensors", out)
  end)

  it("stops cleanly on Ctrl-C: model saved, metrics end with the summary", function()
    local m3 = tmp .. "/m3.jsonl"
    local path = write("long.lua", TINY:format(""))
    local out, status = sh(string.format(
      "%s run %s --out %s/long --set steps=100000 --set log.every=1 --metrics %s --quiet & pid=$!; " ..
      -- interrupt once training is under way (the first step line is written), at most 30 s
      "for i in $(seq 300); do [ -s %s ] && break; sleep 0.1; done; sleep 0.5; kill -INT $pid; wait $pid",
      exe, path, tmp, m3, m3))
    assert.are.equal(130, status, out)
    local lines = read_lines(m3)
    local last = diloco.json_decode(lines[#lines])
    assert.are.equal("summary", last.event)
    assert.is_true(last.interrupted)
    assert.is_true(last.steps > 0 and last.steps < 100000)
    assert.is_truthy(diloco.load_safetensors(tmp .. "/long/model.safetensors"))
  end)
end)

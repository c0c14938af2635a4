-- A run's lifecycle around its training (issue 7): the run directory and its lock,
-- saves that never lose a run, metrics that keep their history, resume that names what
-- changed, checkpoint metadata validated, a closed stdout and a full disk.  Each case was
-- seen failing before: the comment above it says how.
local diloco = require "diloco"
local exe = assert(os.getenv("DILOCO_LUA"), "set DILOCO_LUA to the diloco-lua executable")

local H = require "spec.helpers"
local sh, read_lines = H.sh, H.read_lines
local scratch = H.scratch()
local tmp, write = scratch.dir, scratch.write

local function file_size(path)
  local s = diloco.replay.read_file(path)
  return s and #s
end

local TINY = [[
local diloco = require "diloco"
return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 16, dim = 32, layers = 1, heads = 2 },
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 16, batch = 4 },
  inner = diloco.optim.adamw { lr = 3e-3, warmup = 2 },
  steps = 30, eval = { every = 10, batches = 2 }, log = { every = 1 }, seed = 3,
  %s
}
]]
local recipe = write("tiny.lua", TINY:format(""))

local function run(out, flags)
  return sh(string.format("%s run %s --out %s/%s --quiet %s", exe, recipe, tmp, out, flags or ""))
end

local function summary_of(path)
  local lines = read_lines(path)
  return diloco.json_decode(lines[#lines] or "null"), lines
end

-- A fresh directory with a tmpfs of these options mounted on it (the caller unmounts),
-- or nil after marking the test pending where mounting needs a root we are not.
local function tmpfs(name, options)
  local dir = tmp .. "/" .. name
  os.execute("mkdir -p " .. dir)
  local _, mounted = sh("mount -t tmpfs -o " .. options .. " tmpfs " .. dir)
  if mounted ~= 0 then
    pending("needs root to mount a tmpfs (" .. options .. "; CI runs as root)")
    return nil
  end
  return dir
end

describe("the run directory", function()
  -- Seen: re-running a recipe silently overwrote runs/NAME/.
  it("refuses to overwrite an earlier run without --overwrite, and replaces it with", function()
    local out, status = run("again")
    assert.are.equal(0, status, out)
    local before = #read_lines(tmp .. "/again/metrics.jsonl")
    out, status = run("again")
    assert.are.equal(2, status, out)
    assert.matches("already holds a run", out, 1, true)
    assert.matches("--resume latest continues it, --overwrite replaces it", out, 1, true)
    assert.are.equal(before, #read_lines(tmp .. "/again/metrics.jsonl"))
    out, status = run("again", "--overwrite --set steps=5")
    assert.are.equal(0, status, out)
    local s = summary_of(tmp .. "/again/metrics.jsonl")
    assert.are.equal(5, s.steps)
    assert.are.equal(1, #diloco.rundir.checkpoints(tmp .. "/again"))
  end)

  -- Seen: a kill -9 while a run started left its recipe.json and lock, and every later
  -- run on that directory was refused ("already holds a run"), --resume latest too.
  it("takes over a directory whose run was killed while it started (saved nothing)", function()
    local o = tmp .. "/killed-at-start"
    os.execute(string.format("mkdir -p %s && echo '{}' > %s/recipe.json && : > %s/.lock && : > %s/metrics.jsonl", o,
      o, o, o))
    local out, status = sh(string.format("%s run %s --out %s --set steps=3", exe, recipe, o))
    assert.are.equal(0, status, out)
    assert.matches("took over " .. o .. ": it held only the start of a run that never saved anything", out, 1, true)
    local s = summary_of(o .. "/metrics.jsonl")
    assert.are.equal(3, s.steps)
    -- a directory that saved something is still refused
    out, status = sh(string.format("%s run %s --out %s --set steps=3", exe, recipe, o))
    assert.are.equal(2, status, out)
    assert.matches("already holds a run", out, 1, true)
  end)

  -- Seen: a kill -9 between the checkpoint's rename and the model's left
  -- checkpoint-00000082 beside a model.safetensors of step 80.  (Issue 35: the next open
  -- then removed the complete checkpoint-00000082 and resumed from step 80.)
  it("after a save cut short between its two files, resumes from its complete checkpoint and writes its model again", function()
    local o = tmp .. "/cut-save"
    local out, status = run("cut-save", "--set steps=5 --set checkpoint.every=5")
    assert.are.equal(0, status, out)
    assert.is_true(os.rename(o .. "/model.safetensors", tmp .. "/model-5.safetensors"))
    out, status = run("cut-save", "--resume latest --set steps=10 --set checkpoint.every=5")
    assert.are.equal(0, status, out)
    -- the state such a kill leaves: checkpoints 5 and 10, the model of step 5
    assert.is_true(os.rename(tmp .. "/model-5.safetensors", o .. "/model.safetensors"))
    local names = {}
    for _, c in ipairs(diloco.rundir.checkpoints(o)) do names[#names + 1] = c.step end
    assert.are.same({ 5, 10 }, names)
    out, status = sh(string.format("%s run %s --out %s --resume latest --set steps=12 --set checkpoint.every=5", exe,
      recipe, o))
    assert.are.equal(0, status, out)
    assert.matches(o .. "/checkpoint-00000010.safetensors is complete, its save was cut short before "
      .. "model.safetensors (step 5): resumed from it, the model of step 10 written again", out, 1, true)
    assert.matches("resuming at step 10", out, 1, true)
    local s = summary_of(o .. "/metrics.jsonl")
    assert.are.equal(12, s.steps)
    local _, meta = diloco.load_safetensors(o .. "/model.safetensors")
    local ck = diloco.rundir.checkpoints(o)
    assert.are.equal(tostring(ck[#ck].step), meta["diloco.step"])
  end)

  -- Seen: two runs on one --out interleaved the metrics into invalid JSON.
  it("refuses a second run on the same directory, naming the first", function()
    local o = tmp .. "/busy"
    local p = io.popen(string.format("%s run %s --out %s --set steps=100000 --quiet >/dev/null 2>&1 & echo $!",
      exe, recipe, o))
    local pid = p:read("l")
    p:close()
    for _ = 1, 300 do -- until the first run is training
      if #read_lines(o .. "/metrics.jsonl") > 0 then break end
      os.execute("sleep 0.05")
    end
    local out, status = run("busy", "--resume latest")
    os.execute("kill -INT " .. pid)
    assert.are.equal(1, status, out)
    assert.matches("another run is using this directory", out, 1, true)
    assert.matches("pid " .. pid, out, 1, true)
    for _ = 1, 300 do
      if (summary_of(o .. "/metrics.jsonl") or {}).event == "summary" then break end
      os.execute("sleep 0.05")
    end
    for _, l in ipairs(read_lines(o .. "/metrics.jsonl")) do assert.is_truthy(diloco.json_decode(l), l) end
  end)

  -- Seen: an unwritable --out threw away the whole run after training it.
  it("checks that --out is writable before training", function()
    local f = write("plain", "x")
    local out, status = sh(string.format("%s run %s --out %s/sub --quiet", exe, recipe, f))
    assert.are.equal(1, status)
    assert.matches("exists and is not a directory", out, 1, true)
    assert.is_nil(out:match('"event"'), "nothing was trained")
  end)

  it("refuses a read-only --out before training", function()
    local ro = tmpfs("ro", "ro,size=64k")
    if not ro then return end
    local out, status = sh(string.format("%s run %s --out %s --quiet", exe, recipe, ro))
    sh("umount " .. ro)
    assert.are.equal(1, status, out)
    assert.matches("Read%-only file system", out)
    assert.is_nil(out:match('"event"'), "nothing was trained")
  end)

  -- Seen: kill -9 left full-size *.tmp.<pid> files that were never removed.
  it("removes the temporary files of a run that died while saving", function()
    local out, status = run("stale", "--set steps=10")
    assert.are.equal(0, status, out)
    local dead = write("stale/model.safetensors.tmp.2147483646.0", "half a model")
    write("stale/checkpoint-00000020.safetensors.tmp.2147483646", "older naming")
    out, status = run("stale", "--resume latest --set steps=12")
    assert.are.equal(0, status, out)
    assert.is_nil(io.open(dead))
    for _, name in ipairs(diloco.listdir(tmp .. "/stale")) do assert.is_nil(name:match("%.tmp%."), name) end
  end)

  -- Seen: the default checkpoint.every = 0 meant a crash lost everything.
  it("checkpoints periodically by default, keeps the last k, and survives kill -9", function()
    assert.is_true(diloco.recipe.schema.checkpoint.fields.minutes.default > 0)
    local o = tmp .. "/crash"
    local p = io.popen(string.format("%s run %s --out %s --set steps=100000 --set checkpoint.minutes=0.002 " ..
      "--set checkpoint.keep=2 --quiet >/dev/null 2>&1 & echo $!", exe, recipe, o))
    local pid = p:read("l")
    p:close()
    for _ = 1, 300 do
      if #diloco.rundir.checkpoints(o) >= 2 then break end
      os.execute("sleep 0.05")
    end
    os.execute("sleep 0.3; kill -KILL " .. pid .. "; sleep 0.2")
    local ckpts = diloco.rundir.checkpoints(o)
    -- keep-last-2, plus one if the kill came between a save and its pruning
    assert.is_true(#ckpts >= 1 and #ckpts <= 3, "keep-last-2 left " .. #ckpts)
    local out, status = run("crash", "--resume latest --set steps=" .. (ckpts[#ckpts].step + 3) ..
      " --set checkpoint.minutes=0.002 --set checkpoint.keep=2")
    assert.are.equal(0, status, out)
    local s, lines = summary_of(o .. "/metrics.jsonl")
    assert.are.equal(ckpts[#ckpts].step + 3, s.steps)
    assert.are.equal(2, #diloco.rundir.checkpoints(o), "a finished save prunes to checkpoint.keep")
    local resumes = 0
    for _, l in ipairs(lines) do
      local e = diloco.json_decode(l)
      if e then resumes = resumes + (e.event == "resume" and 1 or 0) end
    end
    assert.are.equal(1, resumes)
  end)

  it("--resume latest with no checkpoint, and --resume '', are clear errors", function()
    local out, status = run("nothing", "--resume latest")
    assert.are.equal(2, status)
    assert.matches("--resume latest: .* holds no checkpoint", out)
    out, status = run("nothing2", "--resume ''")
    assert.are.equal(2, status)
    assert.matches("--resume: expected a checkpoint path or 'latest', got an empty string", out, 1, true)
  end)
end)

describe("saves", function()
  -- Seen: --metrics naming the checkpoint truncated it to 0 bytes before --resume read it.
  it("never lets --metrics name a checkpoint or model file", function()
    local out, status = run("victim", "--set steps=4")
    assert.are.equal(0, status, out)
    local ck = diloco.rundir.checkpoints(tmp .. "/victim")[1].path
    local size = file_size(ck)
    out, status = run("victim", "--resume " .. ck .. " --set steps=8 --metrics " .. ck)
    assert.are.equal(2, status)
    assert.matches("names a checkpoint or model file", out, 1, true)
    out, status = run("victim2", "--metrics " .. tmp .. "/victim/model.safetensors")
    assert.are.equal(2, status)
    assert.are.equal(size, file_size(ck))
    assert.is_truthy(diloco.load_safetensors(ck))
  end)

  -- Seen: a full disk threw the run away with no summary, and left model.safetensors at
  -- step 40 beside checkpoint.safetensors at step 20.
  it("on a full disk keeps the previous pair and says so in the summary", function()
    -- A tmpfs of 640 KiB: one checkpoint (260 KB) + model (90 KB) fit, two checkpoints do not.
    local disk = tmpfs("small", "size=640k")
    if not disk then return end
    local out, status = sh(string.format("%s run %s --out %s/run --set steps=12 --set checkpoint.every=4 " ..
      "--set checkpoint.keep=5 --quiet", exe, recipe, disk))
    local lines = read_lines(disk .. "/run/metrics.jsonl")
    local ckpts = diloco.rundir.checkpoints(disk .. "/run")
    local model_t, model_meta = diloco.load_safetensors(disk .. "/run/model.safetensors")
    local leftovers = {}
    for _, name in ipairs(diloco.listdir(disk .. "/run")) do
      if name:match("%.tmp%.") then leftovers[#leftovers + 1] = name end
    end
    sh("umount " .. disk)
    assert.are.equal(1, status, out)
    assert.matches("No space left on device", out, 1, true)
    local s = diloco.json_decode(lines[#lines])
    assert.are.equal("summary", s.event)
    assert.are.equal(12, s.steps)
    assert.matches("No space left on device", s.save_error)
    assert.are.equal(4, s.checkpoint_step)
    assert.are.equal(1, #ckpts)
    assert.are.equal(4, ckpts[1].step)
    assert.is_truthy(model_t)
    assert.are.equal("4", model_meta["diloco.step"], "model.safetensors is of the newest checkpoint's step")
    assert.are.same({}, leftovers)
  end)

  -- Seen: metrics on a full disk ended in a partial line.
  it("on a full disk the metrics end with the last complete line", function()
    local disk = tmpfs("tiny-disk", "size=16k")
    if not disk then return end
    local out, status = sh(string.format("%s run %s --out %s/full-metrics --metrics %s/m.jsonl --set steps=400 --quiet",
      exe, recipe, tmp, disk))
    local f = io.open(disk .. "/m.jsonl", "rb")
    local text = f and f:read("a") or ""
    if f then f:close() end
    sh("umount " .. disk)
    assert.are.equal(1, status, out)
    assert.matches("No space left on device", out, 1, true)
    assert.is_true(#text > 4096, "the disk filled: " .. #text .. " bytes")
    assert.are.equal("\n", text:sub(-1), "the file ends at the end of a line")
    for line in text:gmatch("([^\n]*)\n") do assert.is_truthy(diloco.json_decode(line), line) end
  end)

  -- Seen: a failed final save threw away the whole run with no summary.
  it("a failed final save keeps the previous checkpoint and reports it", function()
    -- on_step makes the model path a non-empty directory: rename() over it fails
    local hook = string.format("hooks = { on_step = function(i) if i.step == 6 then " ..
      "os.execute('mkdir -p %s/blocked/model.safetensors.new && rm -f %s/blocked/model.safetensors && " ..
      "mkdir -p %s/blocked/model.safetensors/x') end end },", tmp, tmp, tmp)
    local path = write("blocked.lua", TINY:format(hook))
    local out, status = sh(string.format("%s run %s --out %s/blocked --set steps=8 --set checkpoint.every=4 --quiet",
      exe, path, tmp))
    assert.are.equal(1, status, out)
    local s = summary_of(tmp .. "/blocked/metrics.jsonl")
    assert.are.equal("summary", s.event)
    assert.are.equal(8, s.steps)
    assert.is_truthy(s.save_error)
    assert.are.equal(4, s.checkpoint_step)
    local ckpts = diloco.rundir.checkpoints(tmp .. "/blocked")
    assert.are.equal(4, ckpts[#ckpts].step)
    assert.is_truthy(diloco.load_safetensors(ckpts[#ckpts].path))
  end)
end)

describe("metrics and history", function()
  -- Seen: resuming with the same --metrics truncated the earlier history (23 lines -> 13).
  it("resume appends to the history with a resume event, and names every changed field", function()
    local m = tmp .. "/hist.jsonl"
    local out, status = run("hist", "--set steps=20 --metrics " .. m)
    assert.are.equal(0, status, out)
    local n1 = #read_lines(m)
    -- Seen: a changed recipe and a different steps were not noticed on resume.
    out, status = run("hist", "--resume latest --set steps=30 --set inner.lr=2e-3 --metrics " .. m)
    assert.are.equal(0, status, out)
    assert.matches("steps changed since the checkpoint: 20 -> 30", out, 1, true)
    assert.matches("inner.lr changed since the checkpoint: 0.003 -> 0.002", out, 1, true)
    local lines = read_lines(m)
    assert.is_true(#lines > n1)
    local resume = diloco.json_decode(lines[n1 + 1])
    assert.are.equal("resume", resume.event)
    assert.are.equal(20, resume.step)
    assert.are.equal(20, resume.changed.steps.old)
    assert.are.equal(30, resume.changed.steps.new)
    assert.are.equal(0.002, resume.changed["inner.lr"].new)
    assert.are.equal("summary", diloco.json_decode(lines[n1]).event, "the first run's summary is kept")
  end)

  -- Seen: a changed model was not noticed on resume.
  it("refuses to resume a different model", function()
    local out, status = run("hist", "--resume latest --set steps=40 --set model.dim=64")
    assert.are.equal(2, status)
    assert.matches("model differs from the checkpoint's %(model.dim 32 %-> 64%)", out)
  end)

  -- Seen: hyperparameters were stored nowhere.
  it("saves the effective recipe in OUT and in every checkpoint", function()
    local out, status = run("eff", "--set steps=4 --set inner.lr=1e-3")
    assert.are.equal(0, status, out)
    local f = assert(io.open(tmp .. "/eff/recipe.json"))
    local r = diloco.json_decode(f:read("a"))
    f:close()
    assert.are.equal(1e-3, r.inner.lr)
    assert.are.equal(4, r.steps)
    local _, meta = diloco.load_safetensors(diloco.rundir.checkpoints(tmp .. "/eff")[1].path)
    assert.are.equal(1e-3, diloco.json_decode(meta["diloco.recipe_json"]).inner.lr)
  end)

  -- Seen: no timestamps, key order by hash, 17-digit floats, summary fields missing.
  it("writes event first, a timestamp, a stable order, shortest floats and every summary field", function()
    local out, status = run("fmt", "--set steps=6")
    assert.are.equal(0, status, out)
    local lines = read_lines(tmp .. "/fmt/metrics.jsonl")
    local now = diloco.wall_time()
    for _, l in ipairs(lines) do
      assert.matches('^{"event":"[a-z]+","time":%d+%.%d%d%d,', l)
      local t = diloco.json_decode(l).time
      assert.is_true(math.abs(now - t) < 600, "a wall-clock time")
      if l:match('"event":"step"') then
        assert.matches('^{"event":"step","time":[%d.]+,"step":%d+,"loss":', l)
        local text = l:match('"loss":([^,}]+)')
        local v = tonumber(text)
        assert.are.equal(string.pack("<f", v), string.pack("<f", v)) -- an f32 value
        local digits = #text:gsub("[^%d]", ""):gsub("^0+", "")
        for shorter = 1, digits - 1 do -- no shorter text reads back to the same f32
          local s = string.format("%." .. shorter .. "g", v)
          assert.are_not.equal(string.pack("<f", tonumber(s)), string.pack("<f", v), text .. " vs " .. s)
        end
      end
    end
    local last = lines[#lines]
    for _, k in ipairs(diloco.metrics.SUMMARY) do
      assert.matches('"' .. k .. '":', last, 1, true)
    end
    assert.matches('"final_eval_accuracy":null', last, 1, true)
    assert.matches('"signal":null', last, 1, true)
    -- no exponent where a plain number reads as well (seen: "rolled_back_tokens":4.096e+04);
    -- the very small and very large keep theirs
    local line = diloco.metrics.line("x", { a = 40960.0, b = 20.0, c = 0.1, d = 1.5e-05, e = 2.5e20, f = -3e5,
      g = 1234567.5 }, 0)
    assert.are.equal('{"event":"x","time":0.000,"a":40960.0,"b":20.0,"c":0.1,"d":1.5e-05,"e":2.5e+20,"f":-300000.0,'
      .. '"g":1234567.5}', line)
    assert.are.equal("300000", diloco.metrics.double_text(3e5))
    assert.are.equal("0.30000000000000004", diloco.metrics.double_text(0.1 + 0.2))
  end)

  -- Seen (issue 35): a peer's ERROR text that was not UTF-8 reached a fault event, the
  -- JSON writer refused it and the syncer stopped.  No string fails a metrics line.
  it("a metrics line of strings that are not UTF-8 is still a JSON line", function()
    local bad = "peer \xff\xfe caf\xc3\xa9 \xe2\x82"
    local line = diloco.metrics.line("fault", { kind = "refused", text = bad, ["k\xff"] = 1,
      nested = { bad, { why = bad } } }, 0)
    local v = assert(diloco.json_decode(line), line)
    assert.are.equal("peer ?? caf\xc3\xa9 ??", v.text)
    assert.are.equal(1, v["k?"])
    assert.are.same({ "peer ?? caf\xc3\xa9 ??", { why = "peer ?? caf\xc3\xa9 ??" } }, v.nested)
    assert.are.equal("caf\xc3\xa9", diloco.metrics.valid_utf8("caf\xc3\xa9"))
  end)

  -- Seen: /dev/full as the metrics file was exit 0.
  it("a metrics file that cannot be written fails the run, which still saves", function()
    local out, status = run("full", "--set steps=6 --metrics /dev/full")
    assert.are.equal(1, status, out)
    assert.matches("metrics /dev/full: writing failed: No space left on device", out, 1, true)
    local ckpts = diloco.rundir.checkpoints(tmp .. "/full")
    assert.are.equal(1, #ckpts)
    assert.is_truthy(diloco.load_safetensors(ckpts[1].path))
  end)

  -- Seen: `diloco-lua run recipe.lua | head -n 2` lost the run after 3 steps (SIGPIPE).
  it("a closed stdout stops the run, which still saves and writes its summary", function()
    local o = tmp .. "/pipe"
    local out = sh(string.format("{ %s run %s --out %s --set steps=100000 --set log.every=1; echo \"run=$?\" >%s.status; } " ..
      "| head -n 2 >/dev/null", exe, recipe, o, o))
    local f = assert(io.open(o .. ".status"))
    local st = f:read("a")
    f:close()
    assert.matches("run=1", st, 1, true)
    local s = summary_of(o .. "/metrics.jsonl")
    assert.are.equal("summary", s.event, out)
    assert.matches("stdout", s.error)
    assert.is_true(s.steps >= 1 and s.steps < 100000)
    local ckpts = diloco.rundir.checkpoints(o)
    assert.are.equal(s.steps, ckpts[#ckpts].step)
  end)
end)

describe("resume validates the checkpoint", function()
  local function doctored(name, changes)
    local src = diloco.rundir.checkpoints(tmp .. "/eff")[1].path
    local t, meta, names = diloco.load_safetensors(src)
    for k, v in pairs(changes) do meta[k] = v end
    local list = {}
    for _, n in ipairs(names) do list[#list + 1] = { n, t[n] } end
    local path = tmp .. "/" .. name .. ".safetensors"
    assert(diloco.save_safetensors(path, list, meta))
    return path
  end
  -- Seen: diloco.step=-5 and diloco.optim_steps=-100 crashed with a traceback or were used.
  for key, value in pairs { ["diloco.step"] = "-5", ["diloco.optim_steps"] = "-100", ["diloco.tokens"] = "lots",
    ["diloco.loader"] = "[1,2", ["diloco.recipe_json"] = "7" } do
    it("names a bad " .. key, function()
      local path = doctored(key:gsub("%.", "_"), { [key] = value })
      local out, status = run("doc" .. key:gsub("%.", "_"), "--set steps=8 --set inner.lr=1e-3 --resume " .. path)
      assert.are.equal(2, status, out)
      assert.matches(key, out, 1, true)
      assert.is_nil(out:match("%.lua:%d+:"), "no internal positions: " .. out)
    end)
  end
end)

describe("recipe functions", function()
  -- Seen: a model function returning a non-module crashed with a traceback.
  it("a model function must return a module", function()
    local path = write("notmodule.lua", [[
local diloco = require "diloco"
return diloco.recipe { model = function() return 42 end,
  data = diloco.data.synthetic_text { bytes = 20000, ctx = 16, batch = 4 }, steps = 3 }
]])
    local out, status = sh(string.format("%s run %s --out %s/nm --quiet", exe, path, tmp))
    assert.are.equal(2, status, out)
    assert.matches("the model function returned number: expected a diloco.nn module", out, 1, true)
  end)

  -- Seen: hooks.lr returning 1e300 or the string "0.1" crashed.
  for i, v in ipairs { "1e300", "'0.1'", "0/0" } do
    it("hooks.lr returning " .. v .. " is a clear error", function()
      local path = write("lr.lua", TINY:format("hooks = { lr = function() return " .. v .. " end },"))
      local out, status = sh(string.format("%s run %s --out %s/lr%d --quiet", exe, path, tmp, i))
      assert.are.equal(1, status, out)
      assert.matches("hooks.lr(1) returned", out, 1, true)
      assert.matches("expected a finite learning rate >= 0", out, 1, true)
    end)
  end
end)

teardown(scratch.cleanup)

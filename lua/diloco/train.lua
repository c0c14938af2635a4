-- diloco.train: one learner training a validated recipe (islands.count = 1).
--
--   local r = assert(diloco.recipe.validate(diloco.recipe.load("recipes/charlm.lua")))
--   local summary, interrupted, signo = diloco.train.run(r, { out = "runs/charlm" })
--
-- The run in pieces a learner reuses: M.prepare (run directory, model, optimizer,
-- data, metrics, resume), M.inner_step (batch -> loss -> backward -> clip -> step),
-- M.maybe_eval, M.maybe_checkpoint, M.report (metrics and progress), M.finish (final
-- eval, save, summary).  M.run strings them together.
--
-- What a run guarantees (docs/cli.md, "What a run guarantees"):
--   * SIGINT, SIGTERM or SIGHUP: the step under way finishes, the run saves, writes its
--     summary and returns; the CLI exits 128 + the signal's number (130, 143, 129).
--   * A closed stdout (`run ... | head`), a metrics write that fails (full disk,
--     /dev/full) or an error in training (divergence, a hook): the run stops, saves what
--     it has, and fails with the error (exit 1) after the summary.
--   * A save that fails keeps the previous checkpoint and model; the summary names the
--     error and the last good checkpoint.
-- Errors are one type: a raised {diloco_error = message, code = exit status} table.
local diloco = require "diloco"
local summary_rec = require "diloco.summary"
local M = {}

-- A Lua error message without its "file.lua:12: " position prefix (the position of
-- our own loader code means nothing to the user).
local function plain(msg)
  if type(msg) == "table" and msg.diloco_error then return msg.diloco_error end
  return (tostring(msg):gsub("^[^%s:]+%.lua:%d+: ", ""))
end
M.plain = plain

-- Raises the one error type; code is the CLI's exit status (1: the run failed,
-- 2: something the user gave is wrong).
local function fail_code(code, fmt, ...)
  error({ diloco_error = string.format(fmt, ...), code = code }, 0)
end
local function fail(fmt, ...) fail_code(1, fmt, ...) end
M.fail, M.fail_code = fail, fail_code

-- Every recipe hook runs through here: one protected call; an error stops the run,
-- naming the hook and the error (its position in the recipe included); the hook's
-- traceback is kept for --debug (diloco.cli prints it), not printed otherwise.  A
-- SIGINT/SIGTERM/SIGHUP that arrives while a hook runs (an endless one included) ends the
-- hook at once with {diloco_stop = signal}, which the drivers' loops take as that signal
-- arriving between two steps (M.loop_error).
local HOOK_CHECK_EVERY = 100000 -- Lua instructions between two looks at the signals
function M.call_hook(name, fn, ...)
  local tb
  local prev = table.pack(debug.gethook())
  if not diloco.signal_pending() then -- (already stopping: the hook runs to its end)
    debug.sethook(function()
      local sig = diloco.signal_pending()
      if sig then error({ diloco_stop = sig }, 0) end
    end, "", HOOK_CHECK_EVERY)
  end
  local ok, res = xpcall(fn, function(e)
    if type(e) ~= "table" or not e.diloco_stop then
      tb = debug.traceback(type(e) == "table" and e.diloco_error or tostring(e), 2)
    end
    return e
  end, ...)
  debug.sethook(prev[1], prev[2], prev[3])
  if not ok then
    if type(res) == "table" and res.diloco_stop then error(res, 0) end
    local msg = type(res) == "table" and res.diloco_error or tostring(res)
    error({ diloco_error = string.format("hooks.%s failed: %s", name, msg), code = 1, hook_traceback = tb }, 0)
  end
  return res
end

-- What a driver's loop that ended with the error e reports: nil when a signal stopped a
-- hook (the run then stops as for that signal between steps), else the message.
function M.loop_error(e)
  if e == nil or (type(e) == "table" and e.diloco_stop) then return nil end
  return plain(e)
end
local call_hook = M.call_hook

-- Model options without `arch`, as given in the recipe (saved as JSON metadata so
-- `diloco-lua sample` can rebuild the model from model.safetensors alone).
local function model_options(spec)
  local o = {}
  for k, v in pairs(spec) do
    if k ~= "arch" then o[k] = v end
  end
  return o
end

local function is_module(m)
  return type(m) == "table" and type(m.parameters) == "function" and type(m.loss) == "function" and
    type(m.train) == "function" and type(m.eval) == "function"
end

function M.build_model(spec, seed)
  local nn = diloco.nn
  if type(spec) == "function" then
    local ok, m = pcall(spec)
    if not ok then fail_code(2, "model: the model function failed: %s", plain(m)) end
    if not is_module(m) then
      fail_code(2, "model: the model function returned %s: expected a diloco.nn module (with :parameters(), " ..
        ":loss(), :train() and :eval())", type(m) == "table" and "a table that is not a module" or type(m))
    end
    return m
  end
  local o = model_options(spec)
  if o.seed == nil then o.seed = seed end
  local ctor = ({ gpt = nn.GPT, vit = nn.ViT, mlp = nn.MLPClassifier })[spec.arch]
  local ok, m = pcall(ctor, o)
  if not ok then fail_code(2, "model: %s", plain(m)) end
  return m
end

-- One island's trainable state, built the one way every driver builds it (train's one
-- island, sim's islands, a learner process, an MPI rank, replay's learners): the model in
-- training mode, its parameter list and Params, and the inner optimizer, set into `into`
-- (the driver's context for the island, which train.inner_step then reads).
function M.island_model(r, into)
  into.model = M.build_model(r.model, r.seed)
  into.model:train()
  into.plist = into.model:parameters()
  into.params = diloco.Params(into.plist)
  into.opt = diloco.optim.build(into.params, r.inner)
  return into
end

-- The island's data: the recipe's, at `batch` rows a step (the island's batch, times its
-- ranks), shard `shard` of `count`, seeded by the run.  pcall's results: true and the
-- loaders, or false and the error (each driver reports it its way).
function M.open_data(r, batch, shard, count)
  local d = r.data
  if batch and batch ~= d.batch then
    d = {}
    for k, v in pairs(r.data) do d[k] = v end
    d.batch = batch
  end
  return pcall(diloco.data.open, d, shard or 1, count or 1, r.seed)
end

-- The fixed evaluation subset: the 1-based first items (text: windows of a sequential
-- pass, images: examples in order) of n batches of `batch` rows over `items` items.
-- n >= ceil(items / batch): every item once, batches at 1, batch + 1, ... (the last may be
-- short).  Fewer: starts (i * items) // n + 1 for i = 0 .. n - 1, evenly spread, full
-- and disjoint (items / n > batch), the first at 1, the last in the last n-th.  Depends
-- only on the three numbers, never on a seed or a run.
function M.eval_starts(items, batch, n)
  local starts = {}
  if n * batch >= items then
    for s = 1, items, batch do starts[#starts + 1] = s end
  else
    for i = 0, n - 1 do starts[i + 1] = i * items // n + 1 end
  end
  return starts
end

-- Iterator over the x, y of that subset of loaders.eval (loader:batch_at: never
-- shuffled, the cursor untouched), for n = eval.batches:
--   for x, y in train.eval_batches(loaders, 32) do ... end
function M.eval_batches(loaders, n)
  local l = loaders.eval
  local starts = M.eval_starts(l.kind == "text" and l.windows or l.size, l.batch, n)
  local i = 0
  return function()
    i = i + 1
    if starts[i] then return l:batch_at(starts[i]) end
  end
end

-- Mean loss (and accuracy for classifiers) over the fixed subset of `batches` held-out
-- batches (M.eval_batches), weighted by rows: every window / example counts once.
function M.evaluate(model, loaders, batches)
  model:eval()
  local total, correct, seen = 0.0, 0, 0
  diloco.no_grad(function()
    for x, y in M.eval_batches(loaders, batches) do
      local _, ce, logits = model:loss(x, y)
      local rows = x.shape[1]
      total = total + ce:item() * rows
      seen = seen + rows
      if loaders.kind == "images" then
        local pred = (logits or model:forward(x)):argmax(-1)
        local p, l = pred:tolist(), y:tolist()
        for i = 1, #p do
          if p[i] == l[i] then correct = correct + 1 end
        end
      end
    end
  end)
  model:train()
  local r = { loss = total / seen, rows = seen }
  if loaders.kind == "images" then r.accuracy = correct / seen end
  return r
end

-- Held-out batches in the whole eval split (every window / example once).
function M.eval_batches_all(loaders)
  if loaders.eval_batches_all then return loaders.eval_batches_all end
  local l = loaders.eval
  return math.ceil((l.kind == "text" and l.windows or l.size) / l.batch)
end

-- The end of a run's evaluation: the model on the eval.batches subset the curve used
-- (images: the whole split, as before), and with eval.final_all on the whole eval split
-- too (nil when it is off or the subset already was the whole split).  Returns
-- final, all; the final eval event's fields (loss_all, accuracy_all, rows_all) into ev.
function M.final_eval(model, loaders, r, ev)
  local all_n = M.eval_batches_all(loaders)
  local n = loaders.kind == "images" and all_n or r.eval.batches
  local final = M.evaluate(model, loaders, n)
  local all
  if r.eval.final_all and n < all_n then all = M.evaluate(model, loaders, all_n) end
  local whole = all or (n >= all_n and final) or nil
  if ev and whole then
    ev.loss_all, ev.accuracy_all, ev.rows_all = whole.loss, whole.accuracy, whole.rows
  end
  return final, whole
end

-- The summary's fields of the whole-split eval (M.final_eval): summary.all_fields.
M.all_fields = summary_rec.all_fields

-- ---- checkpoints ----

local function checkpoint_meta(ctx)
  local r = ctx.recipe
  local meta = {
    ["diloco.format"] = "1",
    ["diloco.recipe"] = r.name or "",
    ["diloco.step"] = tostring(ctx.step),
    ["diloco.tokens"] = tostring(ctx.tokens),
    ["diloco.loader"] = diloco.json_encode(ctx.loaders.train:state()),
    ["diloco.optim_steps"] = tostring(ctx.opt:step_count()),
    ["diloco.recipe_json"] = ctx.recipe_json,
  }
  if type(r.model) == "table" then meta["diloco.model"] = diloco.json_encode(r.model, { sort_keys = true }) end
  return meta
end

-- The model file (the parameters alone) of the checkpoint metadata meta at path.
local function save_model(ctx, path, meta)
  return diloco.save_safetensors(path, ctx.plist, { ["diloco.model"] = meta["diloco.model"],
    ["diloco.step"] = meta["diloco.step"], ["diloco.recipe"] = meta["diloco.recipe"],
    ["diloco.recipe_json"] = meta["diloco.recipe_json"] })
end

-- Saves the checkpoint of the current step and the model beside it (rundir:save).
-- Returns the rundir's result or nil, err; records the outcome in ctx.
local function save(ctx)
  local meta = checkpoint_meta(ctx)
  local t0 = diloco.clock()
  local res, err = ctx.rd:save(ctx.step, function(path)
    local all, state = table.move(ctx.plist, 1, #ctx.plist, 1, {}), ctx.opt:state()
    table.move(state, 1, #state, #all + 1, all)
    return diloco.save_safetensors(path, all, meta)
  end, function(path) return save_model(ctx, path, meta) end)
  ctx.last_save = diloco.clock()
  if res then
    ctx.checkpoint, ctx.checkpoint_step, ctx.save_error = res.path, ctx.step, nil
    ctx.metrics:write("checkpoint", { step = ctx.step, path = res.path, seconds = diloco.clock() - t0,
      removed = #res.removed > 0 and res.removed or nil })
    return res
  end
  ctx.save_error = string.format("saving step %d to %s: %s", ctx.step, ctx.out, plain(err))
  ctx.metrics:write("checkpoint", { step = ctx.step, error = ctx.save_error })
  ctx:warn("%s (the previous checkpoint%s is kept)", ctx.save_error,
    ctx.checkpoint and (" " .. ctx.checkpoint) or "")
  return nil, ctx.save_error
end

-- An integer metadata value of a checkpoint: nil if absent; raises if malformed.
local function meta_int(meta, key, path, lo)
  local s = meta[key]
  if s == nil then return nil end
  local n = math.tointeger(tonumber(s))
  if not n or n < lo or n > 2 ^ 53 or not tostring(s):match("^%-?%d+$") then
    fail_code(2, "--resume %s: metadata %s = %q: expected an integer in [%d, 2^53]", path, key, tostring(s), lo)
  end
  return n
end

local function shape_text(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end

-- Loads a checkpoint written by save into the live parameters and optimizer.
-- Returns step, tokens and the recipe changes since it was written.
local function resume(ctx, path)
  local t, meta = diloco.load_safetensors(path)
  if not t then fail("--resume %s", plain(meta)) end
  local step = meta_int(meta, "diloco.step", path, 0)
  if not step then fail_code(2, "--resume %s: metadata diloco.step is missing (not a diloco checkpoint?)", path) end
  local optim_steps = meta_int(meta, "diloco.optim_steps", path, 0) or step
  local tokens = meta_int(meta, "diloco.tokens", path, 0) or 0

  local changes = {}
  if meta["diloco.recipe_json"] then
    local old = diloco.json_decode(meta["diloco.recipe_json"])
    if type(old) ~= "table" then
      fail_code(2, "--resume %s: metadata diloco.recipe_json is not a JSON object", path)
    end
    changes = require("diloco.recipe_json").changes(old, diloco.json_decode(ctx.recipe_json))
    local model = {}
    for _, c in ipairs(changes) do
      if c.field == "model" or c.field:match("^model%.") then
        model[#model + 1] = string.format("%s %s -> %s", c.field, c.old or "(absent)", c.new or "(absent)")
      end
    end
    if #model > 0 then
      fail_code(2, "--resume %s: the recipe's model differs from the checkpoint's (%s); a checkpoint continues " ..
        "the model it was written for", path, table.concat(model, ", "))
    end
  end

  local function copy_into(list, what)
    for _, p in ipairs(list) do
      local name, dst = p[1], p[2]
      local src = t[name]
      if not src then fail_code(2, "--resume %s: %s tensor '%s' is missing from the checkpoint", path, what, name) end
      local ss, ds = src.shape, dst.shape
      if shape_text(ss) ~= shape_text(ds) then
        fail_code(2, "--resume %s: tensor '%s' has shape %s, this model expects %s (a different model?)", path,
          name, shape_text(ss), shape_text(ds))
      end
      dst:copy(src)
    end
  end
  copy_into(ctx.plist, "parameter")
  copy_into(ctx.opt:state(), "optimizer")
  ctx.opt:set_step_count(optim_steps)
  if meta["diloco.loader"] then
    local state, jerr = diloco.json_decode(meta["diloco.loader"])
    if type(state) ~= "table" then
      fail_code(2, "--resume %s: metadata diloco.loader is not a JSON object: %s", path, tostring(jerr))
    end
    local oks, serr = pcall(ctx.loaders.train.set_state, ctx.loaders.train, state)
    if not oks then fail_code(2, "--resume %s: data cursor: %s", path, plain(serr)) end
  end
  return step, tokens, changes
end

-- ---- the pieces of a run ----

local Ctx = {}
Ctx.__index = Ctx

-- A line for the user: on the progress display when there is one, else stderr.
function Ctx:warn(fmt, ...)
  local line = string.format(fmt, ...)
  io.stderr:write("diloco-lua: ", line, "\n")
  io.stderr:flush()
end

function Ctx:say(fmt, ...)
  if self.bar then self.bar:print(string.format(fmt, ...)) end
end

-- Sets up everything a run needs; raises the one error type (the run directory is
-- released again on failure).  opts: out, metrics, resume ("latest" or a path),
-- overwrite, quiet, progress_out, command.
function M.prepare(r, opts)
  opts = opts or {}
  local ctx = setmetatable({ recipe = r, opts = opts, t_start = diloco.clock(), step = 0, tokens = 0,
    train_time = 0.0 }, Ctx)
  if r.threads then diloco.set_num_threads(r.threads) end
  diloco.catch_signals()
  diloco.seed(r.seed)
  ctx.out = opts.out or r.out or ("runs/" .. (r.name or "run"))
  ctx.rd = diloco.rundir.open(ctx.out, { resume = opts.resume, overwrite = opts.overwrite, metrics = opts.metrics,
    command = opts.command, keep = r.checkpoint.keep })
  local ok, err = pcall(function()
    ctx.recipe_json = diloco.json_encode(require("diloco.recipe_json").effective(r), { sort_keys = true })
    M.island_model(r, ctx)
    local okd, loaders = M.open_data(r)
    if not okd then fail("data: %s", plain(loaders)) end
    ctx.loaders = loaders
    local fits, problems = diloco.recipe.check_data(r, loaders) -- what only the files know
    if not fits then fail_code(2, "%s", table.concat(problems, "; ")) end

    local changes = {}
    if ctx.rd.resume_path then
      ctx.step, ctx.tokens, changes = resume(ctx, ctx.rd.resume_path)
      local behind = ctx.rd.model_behind
      if behind then -- a save cut short between its two files: the model of its checkpoint again
        local wok, werr = save_model(ctx, ctx.out .. "/model.safetensors", checkpoint_meta(ctx))
        if not wok then fail("--resume %s: writing its model: %s", behind.path, plain(werr)) end
      end
      if ctx.step >= r.steps then
        fail_code(2, "--resume %s: the checkpoint is at step %d, the recipe trains %d steps: nothing to do " ..
          "(raise steps)", ctx.rd.resume_path, ctx.step, r.steps)
      end
    end
    local metrics, merr = diloco.metrics.open(ctx.rd.metrics_path, { append = ctx.rd.append })
    if not metrics then fail("%s", merr) end
    ctx.metrics = metrics
    local wok, werr = ctx.rd:write_file("recipe.json",
      diloco.json_encode(require("diloco.recipe_json").effective(r), { sort_keys = true, indent = 2 }) .. "\n")
    if not wok then fail("writing the effective recipe: %s", werr) end
    ctx.first_step, ctx.last_save = ctx.step, diloco.clock()
    if ctx.rd.resume_path then
      local changed = {}
      for _, c in ipairs(changes) do
        changed[c.field] = { old = c.old and diloco.json_decode(c.old), new = c.new and diloco.json_decode(c.new) }
        local note = c.field == "steps" and " (the learning-rate schedule now spans the new total)" or ""
        ctx:warn("--resume: %s changed since the checkpoint: %s -> %s%s", c.field, c.old or "(absent)",
          c.new or "(absent)", note)
      end
      ctx.metrics:write("resume", { step = ctx.step, tokens = ctx.tokens, from = ctx.rd.resume_path,
        changed = next(changed) and changed or nil })
    end
  end)
  if not ok then
    -- failed while it started (the model, the data, a resume): its summary says so, as
    -- sim's does, so a script reading the run directory sees why (and a later run may
    -- take over a directory whose run never saved anything: rundir.never_saved)
    if not ctx.metrics then ctx.metrics = diloco.metrics.open(ctx.rd.metrics_path, { append = ctx.rd.append }) end
    summary_rec.failed_start(ctx, { steps = ctx.step, tokens = ctx.tokens }, plain(err))
    ctx.rd:close()
    error(err, 0)
  end

  local loaders = ctx.loaders
  ctx.unit = loaders.kind == "text" and "tok" or "img"
  ctx.log_every = r.log.every or math.max(1, r.steps // 20)
  ctx.t_window, ctx.tok_window = diloco.clock(), 0
  if not opts.quiet then
    ctx.bar = diloco.progress.new { total = r.steps, every = ctx.log_every, unit = ctx.unit, out = opts.progress_out }
  end
  ctx.n_params = ctx.params:numel()
  ctx:say("%s: %s parameters, %d steps of %d %s%s", r.name or "run", diloco.progress.human(ctx.n_params), r.steps,
    loaders.tokens_per_batch, ctx.unit == "tok" and "tokens" or "images",
    ctx.rd.resume_path and string.format(", resuming at step %d from %s", ctx.step, ctx.rd.resume_path) or "")
  if ctx.rd.overwritten then ctx:say("replaced the earlier run in %s (--overwrite)", ctx.out) end
  if ctx.rd.model_behind then
    ctx:say("%s is complete, its save was cut short before model.safetensors (step %d): resumed from it, the "
      .. "model of step %d written again", ctx.rd.model_behind.path, ctx.rd.model_behind.model_step,
      ctx.rd.model_behind.step)
  end
  for _, k in ipairs(ctx.rd.skipped or {}) do
    ctx:warn("--resume latest: %s skipped (kept): %s", k.name, k.why)
  end
  if ctx.rd.took_over then
    ctx:say("took over %s: it held only the start of a run that never saved anything (%s: killed or failed while it started)",
      ctx.out, table.concat(ctx.rd.took_over, ", "))
  end
  if #ctx.rd.removed_temps > 0 then
    ctx:say("removed %d temporary file%s of an earlier run that died while saving", #ctx.rd.removed_temps,
      #ctx.rd.removed_temps == 1 and "" or "s")
  end
  return ctx
end

-- The inner learning rate of the step about to run, at schedule step `step` (0-based) of
-- `total` (default the recipe's steps): the schedule's (inner.lr without one), or what
-- hooks.lr(step + 1, that) returns (checked).  The one computation of it: every driver
-- (a run, each island of a sim, a learner process and its dp steps, a replay) calls this.
function M.lr_at(r, step, total)
  local lr = r.inner.schedule and diloco.optim.lr_at(r.inner, step, total or r.steps) or r.inner.lr
  if r.hooks.lr then
    local v = call_hook("lr", r.hooks.lr, step + 1, lr)
    if math.type(v) == nil or v ~= v or v < 0 or v > 3.4e38 then
      fail("hooks.lr(%d) returned %s%s: expected a finite learning rate >= 0 (a number)", step + 1,
        type(v) == "string" and string.format("%q", v) or tostring(v), type(v) == "string" and " (a string)" or "")
    end
    lr = v
  end
  return lr
end

-- The two halves of a data-parallel step, written once for every driver (a learner
-- process and its catch-up replay, each island of a sim, sim --replay): the gradient of a
-- batch here, the optimizer step once the syncer's average is back in the gradients.
-- dp_gradient: the learning rate of schedule step `step` (of `total`), forward and
-- backward of the next batch; returns the loss and that rate.
function M.dp_gradient(r, model, params, loaders, step, total)
  local lr = M.lr_at(r, step, total)
  local x, y = loaders.train:next()
  params:zero_grad()
  local loss = model:loss(x, y)
  loss:backward()
  local lv = loss:item()
  loss:free()
  return lv, lr
end

-- dp_apply: the averaged gradient clipped (inner.clip) or its norm measured, check(norm)
-- when given (it may raise: the step is then not applied), then the optimizer step at
-- rate lr.  Returns the norm.
function M.dp_apply(r, params, opt, lr, check)
  local gnorm = r.inner.clip > 0 and params:clip_grad_norm(r.inner.clip) or params:grad_norm()
  if check then check(gnorm) end
  opt:step(lr)
  return gnorm
end

-- One inner step: batch -> loss -> backward -> clip -> optimizer step.  Returns
-- {loss, aux, grad_norm, lr}.  A diverged step raises before the update, so the
-- parameters stay those of the last good step.  The one inner step of every driver: a
-- run, each island of a sim, a learner process.  ctx: recipe, loaders, model, params,
-- opt, step (the schedule's step), total (the schedule's length, default steps), who (a
-- prefix of the divergence message: "island 2"), tokens, train_time, tok_window, loss_ema.
function M.inner_step(ctx)
  local r, loaders = ctx.recipe, ctx.loaders
  local t0 = diloco.clock()
  local lr = M.lr_at(ctx.recipe, ctx.step, ctx.total)
  local x, y = loaders.train:next()
  if ctx.rows then x, y = x:slice(1, ctx.rows[1], ctx.rows[2]), y:slice(1, ctx.rows[1], ctx.rows[2]) end
  ctx.params:zero_grad()
  local loss, ce = ctx.model:loss(x, y)
  local lv = loss:item()
  local aux = ce and ce ~= loss and lv - ce:item() or nil -- auxiliary losses (MoE balance)
  -- an island of several ranks (learner.lua): this rank's rows of the island's batch
  -- (ctx.rows); the loss averaged over the ranks here, the gradients after the backward
  -- pass (ctx.reduce), so every rank checks, clips and steps on the same means
  if ctx.reduce_loss then lv = ctx.reduce_loss(lv) end
  if ctx.grad_seed then
    -- an island of R ranks: the backward pass seeded with 1/R, so the sum over the
    -- ranks (ctx.reduce) is the mean gradient without another pass over the arena
    if type(ctx.grad_seed) == "number" then ctx.grad_seed = diloco.full(loss.shape, ctx.grad_seed) end
    loss:backward(ctx.grad_seed)
  else
    loss:backward()
  end
  loss:free()
  if ctx.reduce then ctx.reduce() end
  local gnorm = r.inner.clip > 0 and ctx.params:clip_grad_norm(r.inner.clip) or ctx.params:grad_norm()
  if lv ~= lv or math.abs(lv) == math.huge or gnorm ~= gnorm or gnorm == math.huge then
    -- the one error type (fail), carrying the values: a learner rolls back on it instead
    error({ diloco_error = string.format("%sstep %d: training diverged (loss %s, gradient norm %s), the update was "
      .. "not applied; lower inner.lr (%g) or check the data", ctx.who and ctx.who .. ", " or "", ctx.step + 1,
      tostring(lv), tostring(gnorm), r.inner.lr), code = 1, nonfinite = { loss = lv, grad_norm = gnorm } }, 0)
  end
  ctx.opt:step(lr)
  ctx.step = ctx.step + 1
  ctx.tokens = ctx.tokens + loaders.tokens_per_batch
  ctx.tok_window = ctx.tok_window + loaders.tokens_per_batch
  ctx.train_time = ctx.train_time + (diloco.clock() - t0)
  ctx.loss_ema = ctx.loss_ema and (0.9 * ctx.loss_ema + 0.1 * lv) or lv
  return { loss = lv, aux = aux, grad_norm = gnorm, lr = lr }
end

local function rate(ctx)
  return (ctx.step - ctx.first_step) * ctx.loaders.tokens_per_batch / math.max(ctx.train_time, 1e-9)
end

-- Step metrics every log.every steps, the progress display, hooks.on_step.
function M.report(ctx, info)
  local r = ctx.recipe
  if ctx.step % ctx.log_every == 0 or ctx.step == r.steps then
    local now = diloco.clock()
    local ok, err = ctx.metrics:write("step", { step = ctx.step, loss = info.loss, aux_loss = info.aux, lr = info.lr,
      grad_norm = info.grad_norm, tokens = ctx.tokens, tokens_per_s = ctx.tok_window / math.max(now - ctx.t_window, 1e-9),
      wall_s = now - ctx.t_start })
    if not ok then fail("%s", err) end
    ctx.t_window, ctx.tok_window = now, 0
  end
  if ctx.bar then
    ctx.bar:update({ step = ctx.step, loss = ctx.loss_ema, rate = rate(ctx),
      eta = (r.steps - ctx.step) * (ctx.train_time / math.max(ctx.step - ctx.first_step, 1)),
      eval_loss = ctx.last_eval and ctx.last_eval.loss })
    if ctx.bar.failed then fail("%s", ctx.bar.failed) end
  end
  if r.hooks.on_step then
    call_hook("on_step", r.hooks.on_step,
      { step = ctx.step, loss = info.loss, lr = info.lr, grad_norm = info.grad_norm, tokens = ctx.tokens })
  end
end

-- Periodic evaluation (eval.every; the final one is M.finish's).
function M.maybe_eval(ctx)
  local r = ctx.recipe
  if not (r.eval.every > 0 and ctx.step % r.eval.every == 0 and ctx.step < r.steps) then return end
  local e = M.evaluate(ctx.model, ctx.loaders, r.eval.batches)
  e.step = ctx.step
  ctx.last_eval = e
  local ok, err = ctx.metrics:write("eval", { step = ctx.step, loss = e.loss, accuracy = e.accuracy,
    tokens = ctx.tokens, wall_s = diloco.clock() - ctx.t_start })
  if not ok then fail("%s", err) end
  if ctx.bar then ctx.bar:eval(e) end
  if r.hooks.on_eval then call_hook("on_eval", r.hooks.on_eval, e) end
end

-- Periodic checkpoint: every checkpoint.every steps, or checkpoint.minutes after the
-- last save.  A failed save is reported and training goes on (the next period retries).
function M.maybe_checkpoint(ctx)
  local c = ctx.recipe.checkpoint
  local by_steps = c.every > 0 and ctx.step % c.every == 0
  local by_time = (c.minutes or 0) > 0 and diloco.clock() - ctx.last_save >= c.minutes * 60
  if (by_steps or by_time) and ctx.step < ctx.recipe.steps then save(ctx) end
end

-- Why a driver's loop must stop now: nil, or the name of the signal that came (kept in
-- ctx.signal and ctx.signo, the first one).  Every driver (a run, sim, a learner process,
-- the syncer side of a run) asks here.
function M.stop_reason(ctx)
  local name, signo = diloco.signal_pending()
  if name and not ctx.signal then
    ctx.signal, ctx.signo = name, signo
  end
  return ctx.signal
end
local stop_reason = M.stop_reason

-- The end of every run, whatever stopped it: final eval, save, summary.
-- err: the error that stopped the loop (a message), or nil.
function M.finish(ctx, err)
  local r, loaders = ctx.recipe, ctx.loaders
  if ctx.bar then ctx.bar:finish() end
  -- (after a divergence too: the update was not applied, the parameters are good)
  local final, whole
  local fev = {}
  local ok, e, w = pcall(M.final_eval, ctx.model, loaders, r, fev)
  if ok then
    final, whole = e, w
    fev.step, fev.loss, fev.accuracy, fev.tokens, fev.wall_s, fev.final = ctx.step, e.loss, e.accuracy, ctx.tokens,
      diloco.clock() - ctx.t_start, true
    ctx.metrics:write("eval", fev)
  else
    err = err or string.format("final evaluation: %s", plain(e))
  end
  if ctx.checkpoint_step ~= ctx.step or ctx.save_error then save(ctx) end
  stop_reason(ctx) -- a signal during the final eval or save: done now, but it counts
  if not err and ctx.metrics.failed then err = ctx.metrics.failed end
  if not err and ctx.save_error then err = ctx.save_error end
  local summary
  summary, err = summary_rec.finish(ctx, {
    preset = "single", learners = 1, steps = ctx.step, tokens = ctx.tokens,
    goodput = 1.0, uptime = 1.0, bytes_up = 0, bytes_down = 0,
    wall_s = diloco.clock() - ctx.t_start, train_s = ctx.train_time, tokens_per_s = rate(ctx),
    save_error = ctx.save_error, checkpoint = ctx.checkpoint, checkpoint_step = ctx.checkpoint_step,
  }, { final = final, whole = whole, err = err })
  ctx.rd:close()
  diloco.clear_signals()
  if ctx.bar and not ctx.bar.failed then
    ctx.bar:print(string.format("%s after %d steps%s%s; %s", ctx.signal and ("stopped by " .. ctx.signal) or
      (err and "failed" or "done"), ctx.step,
      final and string.format(": eval loss %.4f%s", final.loss, whole and whole ~= final and
        string.format(" (%d batches; the whole eval split, %d rows: %.4f)", r.eval.batches, whole.rows, whole.loss) or "")
        or "",
      final and final.accuracy and string.format(", accuracy %.2f%%", 100 * final.accuracy) or "",
      ctx.checkpoint and string.format("%s %s/s; saved %s", diloco.progress.human(summary.tokens_per_s), ctx.unit,
        ctx.checkpoint) or "nothing saved"))
  end
  return summary, err
end

-- Trains recipe r (validated).  opts: see M.prepare.  Returns the summary, whether a
-- signal stopped the run, and that signal's number.  A failed run (an error in
-- training, a failed save or metrics write, a closed stdout) saves what it can, writes
-- its summary, then raises the one error type with code 1.
function M.run(r, opts)
  local ctx = M.prepare(r, opts)
  local ok_loop, loop_err = pcall(function()
    while ctx.step < r.steps do
      if stop_reason(ctx) then break end
      local info = M.inner_step(ctx)
      M.report(ctx, info)
      M.maybe_eval(ctx)
      M.maybe_checkpoint(ctx)
    end
    stop_reason(ctx) -- a signal during the last step still counts
  end)
  local summary, err = M.finish(ctx, not ok_loop and M.loop_error(loop_err) or nil)
  if err then
    error({ diloco_error = tostring(err), code = 1, summary = summary,
    hook_traceback = type(loop_err) == "table" and loop_err.hook_traceback or nil }, 0)
  end
  return summary, ctx.signal ~= nil, ctx.signo
end

return M

-- diloco.train: one learner training a validated recipe (islands.count = 1).
--
--   local r = assert(diloco.recipe.validate(diloco.recipe.load("recipes/charlm.lua")))
--   local summary, interrupted, signo = diloco.train.run(r, { out = "runs/charlm" })
--
-- The one-island driver: its context is the island itself (lua/diloco/island.lua, which
-- every driver configures) with a run directory, metrics and a progress display.  In
-- pieces: M.prepare (run directory, model, optimizer, data, metrics, resume),
-- M.maybe_eval, M.maybe_checkpoint, M.report (metrics and progress), M.finish (final
-- eval, save, summary).  M.run strings them together.  The island's own functions
-- (inner_step, lr_at, evaluate, ...) are here too, under the names they have always had.
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
local errors = require "diloco.errors"
local island = require "diloco.island"
local runhost = require "diloco.runhost"
local M = {}

-- The one error type and the hooks (lua/diloco/errors.lua), and what every driver does
-- with an island (lua/diloco/island.lua), under the names this module has always had.
local plain, fail, fail_code = errors.plain, errors.fail, errors.fail_code
M.plain, M.fail, M.fail_code, M.call_hook, M.loop_error = plain, fail, fail_code, errors.call_hook, errors.loop_error
for _, k in ipairs { "build_model", "open_data", "eval_starts", "eval_batches", "evaluate", "eval_batches_all",
  "final_eval", "lr_at", "dp_gradient", "dp_apply", "inner_step", "stop_reason" } do
  M[k] = island[k]
end
-- The summary's fields of the whole-split eval (M.final_eval): summary.all_fields.
M.all_fields = summary_rec.all_fields

-- One island's model, parameter list, Params and inner optimizer into `into` (a table
-- that is not an island yet: island.new and Island:build are the way).
function M.island_model(r, into)
  local I = island.new(r, {})
  I:build()
  into.model, into.plist, into.params, into.opt = I.model, I.plist, I.params, I.opt
  return into
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

-- Loads a checkpoint written by Island:save into the island ctx (its parameters too).
-- Returns step, tokens and the recipe changes since it was written; raises (code 2) on
-- a checkpoint that does not continue this run.
local function resume(ctx, path)
  local step, changes
  local meta, why = ctx:restore(path, { model = true, check = function(meta)
    step = meta_int(meta, "diloco.step", path, 0)
    if not step then fail_code(2, "--resume %s: metadata diloco.step is missing (not a diloco checkpoint?)", path) end
    meta_int(meta, "diloco.optim_steps", path, 0)
    meta_int(meta, "diloco.tokens", path, 0)
    changes = {}
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
  end })
  if not meta and not step then fail("--resume %s", why) end -- unreadable (the message names the file)
  if not meta then fail_code(2, "--resume %s: %s", path, why) end
  if why then fail_code(2, "--resume %s: %s", path, why) end
  if meta["diloco.optim_steps"] == nil then ctx.opt:set_step_count(step) end
  return step, ctx.tokens, changes
end

-- ---- the pieces of a run ----

-- Sets up everything a run needs; raises the one error type (the run directory is
-- released again on failure).  opts: out, metrics, resume ("latest" or a path),
-- overwrite, quiet, progress_out, command.
function M.prepare(r, opts)
  opts = opts or {}
  -- the run's context is its one island: a one-island run configures it with no id,
  -- the recipe's steps logged at the last, and a progress display
  local ctx = island.new(r, { opts = opts, last_step = r.steps })
  runhost.begin(r)
  ctx.out = opts.out or r.out or ("runs/" .. (r.name or "run"))
  ctx.rd = diloco.rundir.open(ctx.out, { resume = opts.resume, overwrite = opts.overwrite, metrics = opts.metrics,
    command = opts.command, keep = r.checkpoint.keep })
  local ok, err = pcall(function()
    runhost.recipe_files(ctx) -- (recipe.json once the run directory's metrics are open, below)
    ctx:build()
    local okd, loaders = ctx:open_data()
    if not okd then fail("data: %s", plain(loaders)) end
    local fits, problems = diloco.recipe.check_data(r, loaders) -- what only the files know
    if not fits then fail_code(2, "%s", table.concat(problems, "; ")) end

    local changes = {}
    if ctx.rd.resume_path then
      ctx.step, ctx.tokens, changes = resume(ctx, ctx.rd.resume_path)
      local behind = ctx.rd.model_behind
      if behind then -- a save cut short between its two files: the model of its checkpoint again
        local wok, werr = ctx:save_model(ctx.out .. "/model.safetensors", ctx:checkpoint_meta(ctx.step))
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
    runhost.recipe_files(ctx, true)
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

local function rate(ctx)
  return (ctx.step - ctx.first_step) * ctx.loaders.tokens_per_batch / math.max(ctx.train_time, 1e-9)
end

-- Step metrics every log.every steps and hooks.on_step (Island:report), the progress display.
function M.report(ctx, info)
  local r = ctx.recipe
  ctx:report(ctx.step, info)
  if ctx.bar then
    ctx.bar:update({ step = ctx.step, loss = ctx.loss_ema, rate = rate(ctx),
      eta = (r.steps - ctx.step) * (ctx.train_time / math.max(ctx.step - ctx.first_step, 1)),
      eval_loss = ctx.last_eval and ctx.last_eval.loss })
    if ctx.bar.failed then fail("%s", ctx.bar.failed) end
  end
end

-- Periodic evaluation (eval.every; the final one is M.finish's).
function M.maybe_eval(ctx)
  local r = ctx.recipe
  if not (r.eval.every > 0 and ctx.step % r.eval.every == 0 and ctx.step < r.steps) then return end
  local e = ctx:evaluate()
  e.step = ctx.step
  ctx.last_eval = e
  if ctx.bar then ctx.bar:eval(e) end
  runhost.eval_line(ctx, e, { step = ctx.step, tokens = ctx.tokens })
end

-- Periodic checkpoint: every checkpoint.every steps, or checkpoint.minutes after the
-- last save.  A failed save is reported and training goes on (the next period retries).
function M.maybe_checkpoint(ctx)
  if ctx:checkpoint_due(ctx.step) and ctx.step < ctx.recipe.steps then ctx:save(ctx.step) end
end

local stop_reason = M.stop_reason

-- The end of every run, whatever stopped it: final eval, save, summary.
-- err: the error that stopped the loop (a message), or nil.
function M.finish(ctx, err)
  local r = ctx.recipe
  if ctx.bar then ctx.bar:finish() end
  -- (after a divergence too: the update was not applied, the parameters are good)
  local final, whole, eerr = runhost.final_eval(ctx, function(ev) return ctx:final_eval(ev) end,
    { step = ctx.step, tokens = ctx.tokens })
  err = err or eerr
  if ctx.checkpoint_step ~= ctx.step or ctx.save_error then ctx:save(ctx.step) end
  -- (a signal during the final eval or save: done now, but it counts)
  local summary
  summary, err = runhost.close(ctx, {
    preset = "single", learners = 1, steps = ctx.step, tokens = ctx.tokens,
    goodput = 1.0, uptime = 1.0, bytes_up = 0, bytes_down = 0,
    wall_s = diloco.clock() - ctx.t_start, train_s = ctx.train_time, tokens_per_s = rate(ctx),
    save_error = ctx.save_error, checkpoint = ctx.checkpoint, checkpoint_step = ctx.checkpoint_step,
  }, { final = final, whole = whole, err = err, also = { ctx.save_error or false } })
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
      local info = ctx:inner_step()
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

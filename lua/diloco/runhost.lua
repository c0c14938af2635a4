-- diloco.runhost: what every driver's run does around its islands, written once: the
-- effective recipe in the run's files, the evaluation lines (periodic and final) with
-- hooks.on_eval, the global model file, and the end (the summary, the run directory
-- released).  The drivers are configurations of it and of lua/diloco/island.lua: a
-- one-island run (train.lua), sim (sim.lua), a learner process (learner.lua) and the
-- syncer side of a run (cluster.lua, runend.lua).  ctx: the driver's context (recipe,
-- t_start, metrics, rd, out, signal).
local diloco = require "diloco"
local errors = require "diloco.errors"
local island = require "diloco.island"
local summary_rec = require "diloco.summary"
local M = {}

local plain, fail, call_hook = errors.plain, errors.fail, errors.call_hook

-- A run's process starts alike in every driver: its compute threads (threads, else the
-- recipe's, else as the environment sets them), SIGINT, SIGTERM and SIGHUP caught (a loop
-- finishes its step, saves and ends: island.stop_reason), the recipe's seed.
function M.begin(r, threads)
  threads = threads or r.threads
  if threads then diloco.set_num_threads(threads) end
  diloco.signals.catch()
  diloco.seed(r.seed)
end

-- The effective recipe (after --set, lua/diloco/recipe_json.lua) as the run's files state
-- it: ctx.recipe_json (compact: every model and checkpoint file's metadata) and, with
-- write, OUT/recipe.json (indented, for people and `sim --replay`).
function M.recipe_files(ctx, write)
  local eff = require("diloco.recipe_json").effective(ctx.recipe)
  ctx.recipe_json = diloco.json_encode(eff, { sort_keys = true })
  if write then
    local ok, err = ctx.rd:write_file("recipe.json", diloco.json_encode(eff, { sort_keys = true, indent = 2 }) .. "\n")
    if not ok then fail("writing the effective recipe: %s", err) end
  end
end

-- An evaluation's line in the metrics (e: {loss, accuracy}; fields: its step and tokens,
-- and the driver's own, virtual_s in sim), with the wall time, then hooks.on_eval(e).
function M.eval_line(ctx, e, fields)
  local f = { loss = e.loss, accuracy = e.accuracy, wall_s = diloco.clock() - ctx.t_start }
  for k, v in pairs(fields) do f[k] = v end
  local ok, err = ctx.metrics:write("eval", f)
  if not ok then fail("%s", err) end
  local r = ctx.recipe
  if r.hooks.on_eval then call_hook("on_eval", r.hooks.on_eval, e) end
end

-- The final evaluation: fn(ev) -> final, whole (island.final_eval's results, the whole
-- split's fields into ev), run protected; its line (fields: step, tokens and the
-- driver's) with final = true.  Returns final, whole; or nil, nil and the error.  (Its
-- line's write failing shows as the metrics' failure, which the end reports.)
function M.final_eval(ctx, fn, fields)
  local ev = {}
  local ok, e, w = pcall(fn, ev)
  if not ok then return nil, nil, string.format("final evaluation: %s", plain(e)) end
  ev.loss, ev.accuracy, ev.wall_s, ev.final = e.loss, e.accuracy, diloco.clock() - ctx.t_start, true
  for k, v in pairs(fields) do ev[k] = v end
  ctx.metrics:write("eval", ev)
  return e, w
end

-- The run's global model into OUT/model.safetensors (island.save_model) as of `step`;
-- load() first puts it into plist (run protected: its error is why nothing was saved).
-- Returns true, or nil and the save's error as the summary states it.
function M.save_global(ctx, plist, step, load)
  local ok, err = pcall(load)
  if ok then ok, err = island.save_model(ctx.out .. "/model.safetensors", plist, ctx.recipe, step, ctx.recipe_json) end
  if ok then return true end
  return nil, string.format("saving the global model to %s: %s", ctx.out, plain(err))
end

-- The end every driver shares once its work is done: a signal during its end counts; the
-- run's error is o.err, else the metrics' failure, else the first of o.also (a failed
-- learner, a failed save); the summary (summary.finish: fields, and o's final and whole
-- evals); the run directory released; the signals back to their defaults.  Returns the
-- summary and the error.
function M.close(ctx, fields, o)
  island.stop_reason(ctx)
  local err = o.err
  if not err and ctx.metrics and ctx.metrics.failed then err = ctx.metrics.failed end
  for _, e in ipairs(o.also or {}) do
    if err then break end
    err = e or nil
  end
  local summary
  summary, err = summary_rec.finish(ctx, fields, { final = o.final, whole = o.whole, err = err })
  if ctx.rd then ctx.rd:close() end
  diloco.signals.clear()
  return summary, err
end

return M

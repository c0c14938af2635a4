-- The summary: the last event of every run's metrics (docs/cli.md lists its fields),
-- the record users' scripts read.  Every driver (train, sim, run's syncer side, a
-- learner) ends here: it passes what it measured, and this module adds what every
-- summary states the same way (the recipe, the directory, the signal, the error, the
-- final evals, the engine), writes it last and closes the metrics.  A run that failed
-- while it started writes its one line here too.  scripts/check_layers (rule 8) keeps
-- every summary written from this file.
local diloco = require "diloco"
local M = {}

-- The summary's fields of the whole-split eval (train.final_eval's second result).
function M.all_fields(summary, whole)
  if whole then
    summary.final_eval_loss_all, summary.final_eval_accuracy_all = whole.loss, whole.accuracy
    summary.final_eval_rows_all = whole.rows
  end
  return summary
end

-- Completes fields (the driver's own: steps, tokens, rates, bytes, its account) with
-- the common ones, writes it as the metrics' last event and closes them.  ctx gives
-- recipe, out, metrics, signal, n_params; o: final and whole (the final evals, if run),
-- err (what stopped the run, or nil).  A failed write or close becomes the error when
-- there was none.  Returns the summary and the error.
function M.finish(ctx, fields, o)
  local s, final, err = fields, o.final, o.err
  if final then s.final_eval_loss, s.final_eval_accuracy = final.loss, final.accuracy end
  if not err and ctx.metrics and ctx.metrics.failed then err = ctx.metrics.failed end
  s.params = s.params or ctx.n_params
  s.interrupted, s.signal, s.error = ctx.signal ~= nil, ctx.signal, err
  s.recipe, s.out = ctx.recipe and ctx.recipe.name, ctx.out
  s.gemm, s.threads = diloco.gemm_backend(), diloco.num_threads()
  M.all_fields(s, o.whole)
  if ctx.metrics then
    ctx.metrics:write("summary", s)
    local ok, cerr = ctx.metrics:close()
    if not ok and not err then err, s.error = cerr, cerr end
  end
  return s, err
end

-- The one line of a run that failed while it started (the model, the data, a resume, a
-- bad island): failed_at "start", which rundir.never_saved recognises.  fields: the
-- driver's (preset, learners, steps, tokens); sig: the signal that stopped it, if one did.
function M.failed_start(ctx, fields, err, sig)
  if not ctx.metrics then return end
  local s = fields
  s.interrupted, s.signal = sig ~= nil, sig
  if not sig then s.error = err end
  s.recipe, s.out, s.failed_at = ctx.recipe and ctx.recipe.name, ctx.out, "start"
  ctx.metrics:write("summary", s)
  ctx.metrics:close()
end

return M

-- diloco.runend: the end of a real run's syncer (lua/diloco/cluster.lua): what it asks of
-- the syncer it asks through ctx.host; the account (core/account.h) gives the table's rows,
-- goodput and uptime.  docs/runtime.md, "The account".
local diloco = require "diloco"
local runhost = require "diloco.runhost"
local rc = require "diloco.runctx"
local view = require "diloco.runview"
local M = {}

local elapsed, median = rc.elapsed, rc.median
local tokens_so_far = view.tokens_so_far

local isl_host = require "diloco.island"
local stop_reason = isl_host.stop_reason

-- The uptime's window: H steps at the median step time (one for dp).
local function uptime_window(ctx, step_time)
  return (ctx.recipe.sync.preset == "dp" and 1 or math.max(1, ctx.recipe.sync.H)) * step_time
end

-- The end of a real run: the syncer back if a fault left it down, the final flush, its
-- checkpoint, the final evaluation, the global model saved, the summary (written last in
-- the metrics) and, on stderr, the account's table and the end line.  Returns summary, err.
function M.finish(ctx, err)
  local host = ctx.host
  local r = ctx.recipe
  if not ctx.syncer then -- stopped while it was down: back from its checkpoint, to save the model
    local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
    local last = list[#list]
    host.restore_counts(ctx, last)
    local t0 = diloco.clock()
    local ok, e = pcall(host.start_syncer, ctx, ctx.address, last and last.path or nil)
    if not ok then error(e, 0) end
    -- a restart like the supervisor's at a fault's end (counted, its end event written:
    -- the summary's syncer_restarts and epoch agree with the events)
    ctx.syncer_back_at = nil
    ctx.syncer_restarts = (ctx.syncer_restarts or 0) + 1
    rc.fault(ctx, { kind = "syncer", begin = false, epoch = ctx.syncer:epoch(), from = last and last.path or nil,
      load_s = diloco.clock() - t0, fresh = not last or nil, at_end = true })
  end
  if ctx.shard_back_at and type(ctx.syncer) == "table" then -- a shard down at the end: back now, to save
    for k in pairs(ctx.shard_back_at) do ctx.shard_back_at[k] = 0 end
    require("diloco.shard_faults").fault_ends(ctx, math.huge, function(f) rc.fault(ctx, f) end)
  end
  if type(ctx.syncer) == "table" and ctx.syncer.standbys then -- a killed primary's standby takes over, to save
    local deadline = diloco.clock() + 2 * ctx.rt.timeout + 5
    while ctx.syncer:awaiting_takeover() and diloco.clock() < deadline do pcall(host.pump_syncer, ctx, 0.2) end
  end
  local flushed = pcall(ctx.syncer.flush, ctx.syncer)
  pcall(host.pump_syncer, ctx, 0.2)
  pcall(host.save_syncer, ctx) -- the end, or a signal: what a --resume continues from
  local final, whole, eerr
  if (ctx.opts.shards or 1) == 1 then -- (a shard holds part of the global model: docs/shards.md)
    final, whole, eerr = runhost.final_eval(ctx, function(ev) return host.evaluate_global(ctx, true, ev) end,
      { step = r.steps, tokens = tokens_so_far(ctx) })
  end
  err = err or eerr
  local saved, save_error = runhost.save_global(ctx, ctx.plist, r.steps, function()
    if not pcall(host.load_global, ctx) then error("no global model (dp: no learner saved one)", 0) end
  end)
  -- shard 1 of a sharded syncer: the run's global model from every shard's fragments,
  -- evaluated and saved beside the shards' directories (lua/diloco/shards.lua)
  local assembled, assembly_error
  if (ctx.opts.shards or 1) > 1 and ctx.opts.shard == 1 and saved then
    local root, problems = require("diloco.shards").assemble(ctx, ctx.rt.join_timeout,
      function() return stop_reason(ctx) end)
    ctx.shard_root = root
    if problems then
      assembly_error = "the global model is not assembled: " .. table.concat(problems, "; ")
      io.stderr:write("diloco-lua: syncer: ", assembly_error, "\n")
    else
      final, whole, eerr = runhost.final_eval(ctx, function(ev) return host.evaluate_global(ctx, true, ev) end,
        { step = r.steps, tokens = tokens_so_far(ctx), assembled = true })
      err = err or eerr
      local ok, res, e = pcall(isl_host.save_model, root .. "/model.safetensors", ctx.plist, r, r.steps, ctx.recipe_json)
      if ok and res then assembled = root .. "/model.safetensors"
      else assembly_error = string.format("saving the assembled global model to %s: %s", root, tostring(ok and e or res)) end
    end
  end
  stop_reason(ctx)
  local st = ctx.syncer:stats()
  local wall = elapsed(ctx)
  local t_end = ctx.t_train_end or wall
  local steps, tokens, per, idle, step_times = 0, 0, {}, {}, {}
  local merged_n, accounts = {}, {}
  local t0 = ctx.account:t0()
  for m = 1, r.islands.count do
    local i = ctx.syncer:learner(m)
    local L = ctx.learners[m]
    -- over every process the learner ran as (its own metrics, when its directory is here)
    local acc, lsteps, ltokens, tps = view.island_work(ctx, m, i)
    steps, tokens = steps + (lsteps or 0), tokens + (ltokens or 0)
    if i.step_time > 0 then step_times[#step_times + 1] = i.step_time end
    local share = acc and acc.wall_s > 0 and acc.wait_s / acc.wall_s or (acc and acc.summary or {}).wait_share
    idle[m] = share or diloco.json_null -- (none known: a learner killed before it wrote a step)
    -- the account (core/account.h, docs/runtime.md): every second of the training window
    -- (from the learners' start to the last one's end, the window goodput's capacity is
    -- measured over; not the final flush, evaluation and save) in one bucket, and the
    -- supervisor's seconds of each state: down (killed, crashed or rolled back, until
    -- restarted), paused, held (non-elastic), done before the run ended
    local shares = ctx.account:row(m, t_end)
    local function in_state(state)
      local sec = ctx.account:seconds(m, state, t_end)
      return sec > 0 and sec or nil
    end
    per[m] = { steps = lsteps, tokens = ltokens, idle = share, merged = i.merged, joins = i.joins,
      bytes_up = i.bytes_in, bytes_down = i.bytes_out, crashes = L.crashes,
      state = L.state, tokens_per_s = tps, from = L.from, processes = acc and acc.processes or nil,
      train_s = acc and acc.train_s or nil, wait_s = acc and acc.wait_s or nil,
      startup_s = acc and acc.startup_s or nil, down_s = ctx.account:seconds(m, "down", t_end),
      paused_s = ctx.account:seconds(m, "paused", t_end), held_s = ctx.account:seconds(m, "held", t_end),
      after_done_s = in_state("done"), rolled_back_steps = L.rolled_back_steps,
      ranks = ctx.recipe.islands.list[m].ranks, account = shares }
    merged_n[m], accounts[m] = i.merged, shares
  end
  local account_total = ctx.account:total(t_end)
  local summary = {
    preset = r.sync.preset, learners = r.islands.count, steps = steps, tokens = tokens,
    goodput = t_end > t0 and ctx.account:goodput(t_end) or nil,
    uptime = (median(step_times) or 0) > 0 and ctx.account:uptime(t_end, uptime_window(ctx, median(step_times)))
      or nil,
    bytes_up = st.bytes_in + (ctx.bytes_prev_in or 0), bytes_down = st.bytes_out + (ctx.bytes_prev_out or 0), wall_s = wall, idle = idle, train_s = t_end - (ctx.t_train_start or 0),
    tokens_per_s = tokens / math.max(t_end - (ctx.t_train_start or 0), 1e-9), save_error = save_error,
    merges = ctx.merges,
    rejects = ctx.rejects, faults = ctx.faults, restarts = ctx.restarts, useful_tokens = ctx.account:useful_tokens(),
    refused = st.refused, refused_by = next(st.refused_by or {}) and st.refused_by or nil,
    merges_lost = (ctx.merges_lost or 0) + (ctx.merges_lost_before or 0),
    epoch = ctx.syncer:epoch(), syncer_restarts = ctx.syncer_restarts or 0,
    bytes_by_type = st.bytes_by_type, per_learner = per, run_id = ctx.run_id, address = ctx.address,
    flushed = flushed or nil, runtime = "processes", absent = ctx.absent and #ctx.absent > 0 and ctx.absent or nil,
    job_rollbacks = ctx.job_rollbacks,
    rolled_back_steps = ctx.rolled_back_steps, rolled_back_tokens = ctx.rolled_back_tokens,
    account = account_total,
    -- a shard of a sharded syncer (docs/shards.md): "I/S"; its model holds its fragments only
    shard = (ctx.opts.shards or 1) > 1 and string.format("%d/%d", ctx.opts.shard, ctx.opts.shards) or nil,
    assembled = assembled, assembly_error = assembly_error,
    shard_summaries = ctx.shard_summaries, -- (shard 1 under a launcher: the other shards' own)
    -- islands.syncers = S shards in this process: their count and each one's epoch
    syncers = type(ctx.syncer) == "table" and ctx.syncer:shards() or nil,
    epochs = type(ctx.syncer) == "table" and ctx.syncer:epochs() or nil,
    -- a standby (syncer --standby-of): whom of, and when it took over (nil: it never did)
    standby_of = ctx.opts.standby_of, took_over_s = ctx.took_over,
    replicas = (st.replicas or 0) > 0 and st.replicas or nil,
    -- islands.standbys: the standbys in this process that took over
    takeovers = type(ctx.syncer) == "table" and ctx.syncer.standbys and (ctx.takeovers or 0) or nil,
  }
  -- shard 1 under a launcher: the run's counts over every shard (lua/diloco/shards.lua)
  summary.run = ctx.shard_summaries
    and require("diloco.shards").run_totals(summary, ctx.shard_summaries, ctx.shard_per_learner) or nil
  if summary.run and t_end > t0 then summary.run.goodput = ctx.account:goodput(t_end, summary.run.useful_tokens) end
  -- a syncer that served without some of its learners did not do what it was asked: the
  -- run is saved, and it fails naming them (by hand; `run`'s supervisor has its own rules)
  local absent_error = ctx.absent and #ctx.absent > 0 and string.format("learner%s %s did not join or come back "
    .. "within runtime.join_timeout = %g s: the run ended without %s (its model is saved)", #ctx.absent > 1 and "s" or "",
    table.concat(ctx.absent, ", "), ctx.rt.join_timeout, #ctx.absent > 1 and "them" or "it") or false
  summary, err = runhost.close(ctx, summary, { final = final, whole = whole, err = err,
    also = { ctx.failed_learner or false, absent_error, save_error or false, assembly_error or false } })
  ctx.syncer:close()
  ctx.srd:close()
  if ctx.shard_root and ctx.shard_summaries then -- shard 1 under a launcher: the run's tape in its root
    local ok, terr = require("diloco.shards").write_run_tape(ctx, ctx.shard_root, summary)
    if not ok then io.stderr:write("diloco-lua: syncer: the run's tape in ", ctx.shard_root, ": ", tostring(terr), "\n") end
  end
  if not ctx.quiet then
    io.stderr:write("where each learner's wall time went (docs/runtime.md, the account):\n" ..
      diloco.account.table_text(accounts, account_total, merged_n) .. "\n")
    io.stderr:write(string.format("%s: %d islands, %d steps%s; goodput %s, uptime %s, %s up / %s down, %d merges; %s\n",
      ctx.signal and ("stopped by " .. ctx.signal) or (err and "failed" or "done"), r.islands.count, steps,
      final and string.format(", final eval loss %.4f (the global model, after the last merges%s%s)", final.loss,
        r.sync.final_flush and ", the learners' final flush included" or "",
        whole and whole ~= final and string.format("; the whole eval split, %d rows: %.4f", whole.rows, whole.loss)
        or "") or "",
      summary.goodput and string.format("%.1f%%", 100 * summary.goodput) or "?",
      summary.uptime and string.format("%.1f%%", 100 * summary.uptime) or "?",
      diloco.progress.human(st.bytes_in) .. "B", diloco.progress.human(st.bytes_out) .. "B", st.merges,
      saved and ("saved " .. ctx.out .. "/model.safetensors") or "nothing saved"))
  end
  return summary, err
end

return M

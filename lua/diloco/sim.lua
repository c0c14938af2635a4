-- diloco.sim: `diloco-lua sim RECIPE`, several islands on the virtual-time driver
-- (diloco.VTime, core/vtime.h).  Every learner trains for real (its own model, inner
-- optimizer and data shard); only time and the network are simulated, so the same
-- recipe and seed give the same metrics, wall-clock fields aside.  docs/sim.md.
--
--   local r = assert(diloco.recipe.validate(diloco.recipe.load("recipes/decoupled.lua")))
--   local summary = diloco.sim.run(r, { out = "runs/decoupled" })
--
-- Time: one inner step of island i lasts islands.step_time * (its batch / data.batch) /
-- its speed virtual seconds; the run lasts steps * islands.step_time, so an island at
-- speed 1 with the recipe's batch trains exactly `steps` steps, a faster one more.
-- Each island's learning-rate schedule spans the steps it is expected to run.  An
-- island of R ranks (islands[i].ranks) trains on R x its batch at the time of its batch:
-- its ranks compute side by side, and sim counts their allreduce as free.  With
-- islands.cores = C (the islands share C cores, one compute thread each: learner
-- processes on one host) islands.step_time is a step on a core of its own and a step
-- that starts while n islands compute lasts n / C times longer when n > C; the run's
-- step then spans step_time * max(1, M / C) (its `span`), so M islands all up train
-- `steps` steps in the horizon, as without it.  With islands.stop = "steps" each island
-- instead stops when its schedule step (the run's step it is at: its steps since it
-- joined plus the step it joined at, moved on by catch-ups) reaches `steps`, as run's
-- learners do, the run ends when every live island has (at STOP_CAP x the horizon at the
-- latest), and each island's learning rate follows its schedule step, as in run.
local diloco = require "diloco"
local train = require "diloco.train"
local island = require "diloco.island"
local runhost = require "diloco.runhost"
local summary_rec = require "diloco.summary"
local M = {}

local fail, fail_code, plain = train.fail, train.fail_code, train.plain

local islands = require "diloco.islands"
local call_hook, quorum_value = islands.call_hook, islands.quorum_value

-- Virtual seconds of one of the run's steps: islands.step_time, times M / cores when the
-- islands share fewer cores than there are islands.
local function span(r)
  local c, n = r.islands.cores, r.islands.count
  return r.islands.step_time * ((c and n > c) and n / c or 1)
end

local function build_chaos(r) return islands.chaos(r, r.steps * span(r)) end

-- islands.stop = "steps": the longest a run may last, in horizons (islands this much
-- slower than their step_time say so in a warning)
M.STOP_CAP = 10

-- ---- memory: every island is built in this one process ----

-- Bytes the kernel says a new allocation can still get (MemAvailable), or nil.
local function mem_available()
  local f = io.open("/proc/meminfo", "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  local kb = text:match("MemAvailable:%s*(%d+) kB")
  return kb and tonumber(kb) * 1024 or nil
end

-- What each island holds for the whole run, per float of the model: its parameters and
-- gradients, the inner optimizer's state (AdamW: two moments; SGD and Nesterov: one),
-- and its learner's copies (the last global model, arrived fragments, a contribution,
-- the scratch of one fragment) plus the error feedback with it; the syncer's global
-- model, outer momentum and version ring once.  Activations are per step, one island at
-- a time, and not counted.
local function island_floats(r)
  return 2 + (r.inner.kind == "adamw" and 2 or 1) + 4 + (r.sync.error_feedback and 1 or 0)
end

-- Sets up the run directory, the learners, the eval model and the driver.
local function prepare(r, opts)
  local ctx = { recipe = r, t_start = diloco.clock(), virtual = 0 }
  runhost.begin(r)
  if opts.resume then
    fail_code(2, "--resume: a sim run is not resumed: run it again (the same recipe and seed give the same run)")
  end
  local Mn, isl, sy = r.islands.count, r.islands, r.sync
  if isl.timeout and isl.timeout <= span(r) then
    fail_code(2, "islands.timeout = %gs: expected more than the run's step time (%gs), the islands' heartbeat in sim",
      isl.timeout, span(r))
  end
  local dp = sy.preset == "dp"
  if dp and build_chaos(r) then
    fail_code(2, "chaos with sync.preset = \"dp\": faults in data parallel are not simulated in this version " ..
      "(the goodput simulator, diloco-lua goodput, models them); use diloco, streaming or decoupled")
  end
  ctx.out = opts.out or r.out or ("runs/" .. (r.name or "sim"))
  ctx.rd = diloco.rundir.open(ctx.out, { overwrite = opts.overwrite, metrics = opts.metrics, command = opts.command,
    keep = r.checkpoint.keep, resumable = false }) -- a sim is run again, never resumed
  if ctx.rd.took_over and not opts.quiet then
    io.stderr:write(string.format("diloco-lua: took over %s: it held only the start of a run that never saved "
      .. "anything (%s: killed or failed while it started)\n", ctx.out, table.concat(ctx.rd.took_over, ", ")))
  end
  local ok, err = pcall(function()
    -- the metrics first: a run that fails while it starts still ends them with its summary
    local metrics, merr = diloco.metrics.open(ctx.rd.metrics_path)
    if not metrics then fail("%s", merr) end
    ctx.metrics = metrics
    runhost.recipe_files(ctx, true)
    ctx.learners = {}
    local params = {}
    for m = 1, Mn do
      -- island m (lua/diloco/island.lua) on virtual time: its lines carry no wall-clock rate
      local L = island.new(r, { id = m, island = isl.list[m], steps = 0, lr_step = 0, who = "island " .. m,
        t_start = ctx.t_start, rate = false, metrics = ctx.metrics })
      local sig = diloco.signals.pending()
      if sig then -- a signal while the islands are built: stop now, nothing trained
        error({ diloco_error = string.format("stopped by %s while building island %d of %d", sig, m, Mn),
          code = 1, signal = sig }, 0)
      end
      L:build()
      -- its link to the syncer: vtime's calls for learner m
      L.link = { contribute = function(p) ctx.vt:contribute(m, p) end,
        step_done = function(tokens) ctx.vt:step_done(m, tokens) end }
      local okd, loaders = L:open_data(L.island.batch * (L.island.ranks or 1), L.island.shard, Mn)
      if not okd then fail("data (island %d): %s", m, plain(loaders)) end
      local dt = isl.step_time * (L.island.batch / r.data.batch) / L.island.speed
      L.total = isl.stop == "steps" and r.steps or math.max(1, math.floor(r.steps * isl.step_time / dt + 1e-9))
      ctx.learners[m] = L
      params[m] = L.params
      if m == 1 then -- before building the others: will all of them fit?
        local n, avail = L.params:numel(), mem_available()
        local need = 4 * n * (Mn * island_floats(r) + 2 + r.sync.ring)
        if avail and need > avail then
          local function bytes(b) return b >= 1e9 and string.format("%.1f GB", b / 1e9) or string.format("%.0f MB", b / 1e6) end
          fail_code(2, "islands.count = %d islands of %s parameters need about %s of memory (%s each for its model, "
            .. "gradients, optimizer state and learner), more than the %s available: fewer islands or a smaller model",
            Mn, diloco.progress.human(n), bytes(need), bytes(4 * n * island_floats(r)), bytes(avail))
        end
      end
    end
    local first = ctx.learners[1]
    local fits, problems = diloco.recipe.check_data(r, first.loaders)
    if not fits then fail_code(2, "%s", table.concat(problems, "; ")) end
    ctx.eval_model = island.build_model(r.model, r.seed)
    ctx.eval_plist = ctx.eval_model:parameters()
    ctx.eval_params = diloco.Params(ctx.eval_plist)
    ctx.n_params = first.params:numel()
    ctx.plan = islands.plan(r, first.params, #first.plist)
    for _, L in ipairs(ctx.learners) do L.fragments = #ctx.plan end
    local isls = {}
    for m, L in ipairs(ctx.learners) do
      isls[m] = { speed = L.island.speed, scale = L.island.batch / r.data.batch,
        tokens = L.loaders.tokens_per_batch, latency = L.island.latency, bandwidth = L.island.bandwidth,
        jitter = isl.jitter }
    end
    ctx.chaos = build_chaos(r)
    ctx.schedule = type(sy.schedule) == "function" and sy.schedule or nil
    local step_s = span(r)
    local lopts, sopts, run_json = islands.sync_options(r, first.plist, step_s, isl.timeout or 10 * step_s)
    local okv, vt = pcall(diloco.VTime, {
      params = params, plan = ctx.plan, step_time = isl.step_time,
      horizon = r.steps * step_s * (isl.stop == "steps" and M.STOP_CAP or 1),
      steps = isl.stop == "steps" and r.steps or 0,
      eval_every = r.eval.every > 0 and r.eval.every * step_s or 0, islands = isls, chaos = ctx.chaos,
      learner = lopts, syncer = sopts, run_json = run_json, final_flush = sy.final_flush, seed = r.seed, cores = isl.cores,
      shards = isl.syncers, -- (islands.syncers > 1: the syncer in shards, docs/shards.md)
      -- islands.standbys: each takes over after the syncer's timeout (run's default lease)
      standbys = isl.standbys or false, lease = isl.timeout or 10 * step_s,
    })
    if not okv then fail_code(2, "%s", plain(vt)) end
    ctx.vt = vt
  end)
  if not ok then
    local sig = type(err) == "table" and err.signal or nil
    summary_rec.failed_start(ctx, { preset = sy.preset, learners = Mn, steps = 0, tokens = 0 }, plain(err), sig)
    ctx.rd:close()
    if sig then -- the exit status of that signal, as between two steps
      local _, signo = diloco.signals.pending()
      err.code = 128 + (signo or 15)
    end
    error(err, 0)
  end
  ctx.log_every = r.log.every or math.max(1, r.steps // 20)
  if not opts.quiet then
    ctx.bar = diloco.progress.new { total = r.steps, every = ctx.log_every, label = "island 1 loss",
      unit = ctx.learners[1].loaders.kind == "text" and "tok" or "img", out = opts.progress_out }
    ctx.bar:print(string.format("%s: %d islands (%s), %s parameters, %s virtual seconds; the bar shows island 1's "
      .. "training loss (an EMA over about 10 of its steps), each eval the global model's", r.name or "sim", Mn,
      sy.preset, diloco.progress.human(ctx.n_params), diloco.metrics.double_text(r.steps * span(r))))
  end
  return ctx
end

local function write(ctx, event, fields)
  local ok, err = ctx.metrics:write(event, fields)
  if not ok then fail("%s", err) end
end

local function check_finite(ctx, L, lv, gnorm)
  if lv ~= lv or math.abs(lv) == math.huge or (gnorm and (gnorm ~= gnorm or gnorm == math.huge)) then
    fail("island %d, step %d: training diverged (loss %s, gradient norm %s), the update was not applied; lower " ..
      "inner.lr (%g) or check the data", L.id, L.steps + 1, tostring(lv), tostring(gnorm), ctx.recipe.inner.lr)
  end
end

-- counted: train.inner_step counted the step's tokens, schedule step and loss average
local function report_step(ctx, L, ev, lv, gnorm, lr, counted)
  L.steps = L.steps + 1
  if counted then
    L.lr_step = L.step
  else
    L.tokens = L.tokens + L.loaders.tokens_per_batch
    L.lr_step = L.lr_step + 1
    L.loss_ema = L.loss_ema and 0.9 * L.loss_ema + 0.1 * lv or lv
  end
  L:report(L.steps, { loss = lv, lr = lr, grad_norm = gnorm }, { schedule = ev.schedule + 1, virtual_s = ev.time },
    { virtual_s = ev.time })
  local r = ctx.recipe
  if ctx.bar and L.id == 1 then
    local vstep = math.floor(ev.time / span(r) + 0.5)
    local wall = diloco.clock() - ctx.t_start
    ctx.bar:update({ step = vstep, loss = L.loss_ema, rate = ctx.total_tokens / math.max(wall, 1e-9),
      eta = (r.steps - vstep) * wall / math.max(vstep, 1), eval_loss = ctx.last_eval and ctx.last_eval.loss })
    if ctx.bar.failed then fail("%s", ctx.bar.failed) end
  end
end

local function on_step_event(ctx, ev)
  local r, vt = ctx.recipe, ctx.vt
  local L = ctx.learners[ev.learner]
  local tpb = L.loaders.tokens_per_batch
  if r.islands.stop == "steps" then -- the run's step, as in run
    L.lr_step = ev.schedule
    if ev.schedule + 1 > ctx.reached then ctx.reached = ev.schedule + 1 end
  end
  if r.sync.preset ~= "dp" then
    L.step, L.total = L.lr_step, L.total
    local info = L:inner_step()
    ctx.total_tokens = ctx.total_tokens + tpb
    -- (the schedule step after it, as a learner process passes sync.schedule)
    if L:step_done(ev.schedule + 1, tpb) > 0 then ctx.schedule_sent = true end
    report_step(ctx, L, ev, info.loss, info.grad_norm, info.lr, true)
    return
  end
  -- dp: forward and backward here, the optimizer step once the averaged gradient is back
  L.step = L.lr_step
  local lv, lr = L:dp_gradient()
  ctx.total_tokens = ctx.total_tokens + tpb
  check_finite(ctx, L, lv)
  L.pending = { lr = lr, loss = lv }
  vt:gradient_done(ev.learner, tpb)
end

local function on_optim_event(ctx, ev)
  local L = ctx.learners[ev.learner]
  local gnorm = L:dp_apply(L.pending.lr, function(g) check_finite(ctx, L, L.pending.loss, g) end)
  ctx.vt:optim_done(ev.learner)
  report_step(ctx, L, ev, L.pending.loss, gnorm, L.pending.lr)
end

local function on_merge(ctx, ev)
  local info = islands.merge_info(ev.merge)
  info.virtual_s, info.shard = ev.time, ev.shard -- (islands.syncers > 1: which shard merged)
  write(ctx, "merge", info)
  if ctx.recipe.hooks.on_merge then call_hook("on_merge", ctx.recipe.hooks.on_merge, info) end
end

local function requorum(ctx, ev)
  if type(ctx.recipe.sync.quorum) == "function" then
    ctx.vt:set_quorum(quorum_value(ctx.recipe, ctx.vt:live_count(), ev.time))
  end
end

local function on_fault(ctx, ev)
  local info = { kind = ev.fault or ev.type, learner = ev.learner, begin = ev.begin, duration = ev.duration,
    factor = ev.factor, reason = ev.reason, fragment = ev.fragment, virtual_s = ev.time, latency = ev.latency,
    shard = ev.shard, role = ev.role, -- (islands.syncers > 1: a shard's refusals, timeouts, faults; standbys)
    -- the link from then on, as `run` writes it: bytes/s, 0 for no cap
    bandwidth = ev.bandwidth and (ev.bandwidth == math.huge and 0 or ev.bandwidth) }
  if ev.type == "fault" and ev.fault == "kill" and not ev.begin then
    -- the process restarted: a fresh inner optimizer (docs/algorithm.md §4.7, no checkpoint of its own here)
    local L = ctx.learners[ev.learner]
    L:fresh_optimizer()
    info.optimizer = "fresh"
  end
  if info.duration == math.huge then info.duration = nil end
  write(ctx, ev.type == "reject" and "reject" or "fault", info)
  if ev.type ~= "reject" and ctx.recipe.hooks.on_fault then call_hook("on_fault", ctx.recipe.hooks.on_fault, info) end
  if ev.type ~= "reject" then requorum(ctx, ev) end
end

-- The global model on the held-out subset; final: at the end (train.final_eval: the
-- whole split too, into ev).
local function evaluate_global(ctx, final, ev)
  ctx.vt:global(ctx.eval_params)
  local r = ctx.recipe
  local loaders = ctx.learners[1].loaders
  if final then return island.final_eval(ctx.eval_model, loaders, r, ev) end
  return island.evaluate(ctx.eval_model, loaders, r.eval.batches)
end

local function on_eval(ctx, ev)
  local e = evaluate_global(ctx, false)
  e.step = math.floor(ev.time / span(ctx.recipe) + 0.5)
  ctx.last_eval = e
  runhost.eval_line(ctx, e, { step = e.step, tokens = ctx.total_tokens, virtual_s = ev.time })
  ctx:say_eval(e)
end

local stop_reason = island.stop_reason

local function finish(ctx, err)
  local r = ctx.recipe
  if ctx.bar then ctx.bar:finish() end
  local final, whole, eerr = runhost.final_eval(ctx, function(ev) return evaluate_global(ctx, true, ev) end,
    { step = r.steps, tokens = ctx.total_tokens, virtual_s = ctx.vt:stats().virtual_s })
  err = err or eerr
  -- the global model, readable by `diloco-lua sample`
  -- its step: the run's (virtual time over the step time), not the planned one when stopped early
  local reached = r.islands.stop == "steps" and ctx.reached
    or math.min(r.steps, math.floor(ctx.vt:stats().virtual_s / span(r) + 1e-9))
  local saved, save_error = runhost.save_global(ctx, ctx.eval_plist, reached,
    function() ctx.vt:global(ctx.eval_params) end)
  stop_reason(ctx)
  local st = ctx.vt:stats()
  local steps, tokens, idle, per, merged = 0, 0, {}, {}, {}
  local shares, total = {}, st.account -- (core/account.h: the same rules as run's)
  for m, l in ipairs(st.learners) do
    shares[m] = l.account
    steps, tokens = steps + l.steps, tokens + l.tokens
    idle[m], merged[m] = l.idle, l.merged
    per[m] = { steps = l.steps, tokens = l.tokens, idle = l.idle, down = st.horizon > 0 and l.down_s / st.horizon or 0,
      merged = l.merged, bytes_up = l.bytes_up, bytes_down = l.bytes_down, account = shares[m] }
  end
  local wall = diloco.clock() - ctx.t_start
  local summary = {
    preset = r.sync.preset, learners = r.islands.count, steps = steps, tokens = tokens,
    goodput = st.goodput, uptime = st.uptime, bytes_up = st.bytes_up, bytes_down = st.bytes_down,
    wall_s = wall, virtual_s = st.virtual_s, horizon_s = st.horizon, idle = idle, train_s = wall,
    tokens_per_s = tokens / math.max(wall, 1e-9), save_error = save_error,
    merges = st.merges, rejects = st.rejects, faults = st.faults, dropped = st.dropped,
    useful_tokens = st.useful_tokens, bytes_by_type = st.bytes_by_type, per_learner = per, account = total,
    syncers = r.islands.syncers, -- (the syncer in shards: docs/shards.md)
    takeovers = r.islands.standbys and st.takeovers or nil,
  }
  if r.islands.stop == "steps" and reached < r.steps and not err and not ctx.signal then
    summary.warnings = summary.warnings or {}
    table.insert(summary.warnings, string.format("islands.stop = \"steps\": the run reached step %d of %d in %d "
      .. "horizons (steps x the step time), the longest sim runs it: the islands compute far slower than "
      .. "islands.step_time says", reached, r.steps, M.STOP_CAP))
    io.stderr:write("diloco-lua: warning: ", summary.warnings[#summary.warnings], "\n")
  end
  if ctx.schedule and not ctx.schedule_sent and not err and not ctx.signal then
    summary.warnings = summary.warnings or {}
    table.insert(summary.warnings, "sync.schedule returned no fragment after any step: no contribution was sent "
      .. "during the run " .. (r.sync.final_flush and "(only the final flush's)" or "(nothing was merged: goodput 0)"))
    io.stderr:write("diloco-lua: warning: ", summary.warnings[#summary.warnings], "\n")
  end
  summary, err = runhost.close(ctx, summary, { final = final, whole = whole, err = err, also = { save_error or false } })
  if ctx.bar and not ctx.bar.failed then
    if final then
      ctx.bar:print(string.format("final eval, after the last merges%s: global loss %.4f%s",
        r.sync.final_flush and " (the learners' final flush included)" or "", final.loss,
        whole and whole ~= final and string.format(" (%d batches; the whole eval split, %d rows: %.4f)", r.eval.batches,
          whole.rows, whole.loss) or ""))
    end
    ctx.bar:print("where each island's virtual time went (docs/sim.md, the account):\n" ..
      diloco.account.table_text(shares, total, merged))
    ctx.bar:print(string.format("%s: %d islands, %d steps%s; goodput %.1f%%, uptime %.1f%%, %s up / %s down; %s",
      ctx.signal and ("stopped by " .. ctx.signal) or (err and "failed" or "done"), r.islands.count, steps,
      final and string.format(", final eval loss %.4f", final.loss) or "", 100 * st.goodput, 100 * st.uptime,
      diloco.progress.human(st.bytes_up) .. "B", diloco.progress.human(st.bytes_down) .. "B",
      saved and ("saved " .. ctx.out .. "/model.safetensors") or "nothing saved"))
  end
  return summary, err
end

-- Trains recipe r (validated) on the virtual-time driver.  opts: out, metrics,
-- overwrite, quiet, progress_out, command.  Returns the summary, whether a signal
-- stopped it and that signal's number; a failed run writes its summary, then raises
-- the one error type with code 1.
function M.run(r, opts)
  opts = opts or {}
  local ctx = prepare(r, opts)
  ctx.total_tokens, ctx.reached = 0, 0
  ctx.say_eval = function(self, e)
    if self.bar then
      self.bar:print(string.format("eval at step %d: global loss %.4f%s", e.step, e.loss,
        e.step >= self.recipe.steps and " (before the rounds still open are merged)" or ""))
    end
  end
  local handlers = { step = on_step_event, optim = on_optim_event, merge = on_merge, fault = on_fault,
    lost = on_fault, joined = on_fault, reject = on_fault, eval = on_eval }
  local ok_loop, loop_err = pcall(function()
    while true do
      if stop_reason(ctx) then break end
      local ev = ctx.vt:next()
      if ev.type == "done" then break end
      local h = handlers[ev.type]
      if h then h(ctx, ev) end
    end
  end)
  local summary, err = finish(ctx, not ok_loop and train.loop_error(loop_err) or nil)
  if err then error({ diloco_error = tostring(err), code = 1, summary = summary,
    hook_traceback = type(loop_err) == "table" and loop_err.hook_traceback or nil }, 0) end
  return summary, ctx.signal ~= nil, ctx.signo
end

return M

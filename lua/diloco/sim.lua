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
-- Each island's learning-rate schedule spans the steps it is expected to run.
local diloco = require "diloco"
local train = require "diloco.train"
local M = {}

local fail, plain = train.fail, train.plain
local function fail_code(code, fmt, ...)
  error({ diloco_error = string.format(fmt, ...), code = code }, 0)
end

-- Every recipe hook runs through here: one protected call with a traceback; an error
-- stops the run, naming the hook.
local function call_hook(name, fn, ...)
  local ok, res = xpcall(fn, debug.traceback, ...)
  if not ok then fail("hooks.%s failed: %s", name, plain(res)) end
  return res
end

local function is_embedding(name, patterns)
  for _, p in ipairs(patterns or {}) do
    if name:find(p) then return true end
  end
  return false
end

local function data_for(d, batch)
  local c = {}
  for k, v in pairs(d) do c[k] = v end
  c.batch = batch
  return c
end

-- The quorum the syncer gets (0 = every live learner); a function of the live count
-- is called, and checked.
local function quorum_value(r, live, now)
  local q = r.sync.quorum
  if q == "all" then return 0 end
  if type(q) == "function" then
    local k = call_hook("sync.quorum", q, live, { live = live, learners = r.islands.count, virtual_s = now })
    if math.type(k) ~= "integer" and not (type(k) == "number" and k == math.floor(k)) then
      fail("sync.quorum(%d) returned %s: expected an integer in [1, %d] (or 0 for every live learner)", live,
        tostring(k), r.islands.count)
    end
    k = math.tointeger(k)
    if k < 0 or k > r.islands.count then
      fail("sync.quorum(%d) returned %d: expected an integer in [1, %d] (or 0 for every live learner)", live, k,
        r.islands.count)
    end
    return k
  end
  return q
end

local function build_chaos(r)
  local c = r.chaos
  if c == nil or (#(c.events or {}) == 0 and not c.random) then return nil end
  local ch = diloco.Chaos(r.islands.count)
  for _, e in ipairs(c.events or {}) do
    ch:add { at = e.at, kind = e.kind, learner = e.learner, duration = e.duration or math.huge,
      factor = e.kind == "slow" and e.factor or nil }
  end
  if c.random then
    local horizon = r.steps * r.islands.step_time
    for _, l in ipairs(c.random.learners) do
      ch:poisson { learner = l, mtbf = c.random.mtbf, down = c.random.down,
        exponential_down = c.random.exponential_down or false, horizon = horizon, seed = c.seed }
    end
  end
  return ch
end

-- Sets up the run directory, the learners, the eval model and the driver.
local function prepare(r, opts)
  local ctx = { recipe = r, t_start = diloco.clock(), virtual = 0 }
  if r.threads then diloco.set_num_threads(r.threads) end
  diloco.catch_signals()
  diloco.seed(r.seed)
  if opts.resume then
    fail_code(2, "--resume: a sim run is not resumed: run it again (the same recipe and seed give the same run)")
  end
  local Mn, isl, sy = r.islands.count, r.islands, r.sync
  local dp = sy.preset == "dp"
  if dp and build_chaos(r) then
    fail_code(2, "chaos with sync.preset = \"dp\": faults in data parallel are not simulated in this version " ..
      "(the goodput simulator, diloco-lua goodput, models them); use diloco, streaming or decoupled")
  end
  ctx.out = opts.out or r.out or ("runs/" .. (r.name or "sim"))
  ctx.rd = diloco.rundir.open(ctx.out, { overwrite = opts.overwrite, metrics = opts.metrics, command = opts.command,
    keep = r.checkpoint.keep })
  local ok, err = pcall(function()
    ctx.learners = {}
    local params = {}
    for m = 1, Mn do
      local L = { id = m, island = isl.list[m], steps = 0, tokens = 0, lr_step = 0 }
      L.model = train.build_model(r.model, r.seed)
      L.model:train()
      L.plist = L.model:parameters()
      L.params = diloco.Params(L.plist)
      L.opt = diloco.optim.build(L.params, r.inner)
      local okd, loaders = pcall(diloco.data.open, data_for(r.data, L.island.batch), L.island.shard, Mn, r.seed)
      if not okd then fail("data (island %d): %s", m, plain(loaders)) end
      L.loaders = loaders
      local dt = isl.step_time * (L.island.batch / r.data.batch) / L.island.speed
      L.total = math.max(1, math.floor(r.steps * isl.step_time / dt + 1e-9))
      ctx.learners[m] = L
      params[m] = L.params
    end
    local first = ctx.learners[1]
    local fits, problems = diloco.recipe.check_data(r, first.loaders)
    if not fits then fail_code(2, "%s", table.concat(problems, "; ")) end
    local ferr = diloco.recipe.check_fragments(r, #first.plist)
    if ferr then fail_code(2, "%s", ferr) end
    ctx.eval_model = train.build_model(r.model, r.seed)
    ctx.eval_plist = ctx.eval_model:parameters()
    ctx.eval_params = diloco.Params(ctx.eval_plist)
    ctx.n_params = first.params:numel()
    local okp, plan = pcall(diloco.Plan, first.params, { kind = sy.plan, fragments = dp and 1 or sy.fragments,
      split_rows = sy.split_rows })
    if not okp then fail_code(2, "sync.plan / sync.fragments: %s", plain(plan)) end
    ctx.plan = plan
    local emb = {}
    for i, p in ipairs(first.plist) do emb[i] = is_embedding(p[1], sy.embeddings) end
    local islands = {}
    for m, L in ipairs(ctx.learners) do
      islands[m] = { speed = L.island.speed, scale = L.island.batch / r.data.batch,
        tokens = L.loaders.tokens_per_batch, latency = L.island.latency, bandwidth = L.island.bandwidth }
    end
    ctx.chaos = build_chaos(r)
    ctx.schedule = type(sy.schedule) == "function" and sy.schedule or nil
    local grace = sy.grace
    if sy.grace_s then grace = sy.grace_s end
    local okv, vt = pcall(diloco.VTime, {
      params = params, plan = plan, step_time = isl.step_time, horizon = r.steps * isl.step_time,
      eval_every = r.eval.every > 0 and r.eval.every * isl.step_time or 0, islands = islands, chaos = ctx.chaos,
      learner = { dp = dp, H = ctx.schedule and 0 or sy.H, tau = sy.tau, alpha = sy.alpha, blocking = sy.blocking,
        codec = sy.codec, block = sy.block, error_feedback = sy.error_feedback, heartbeat = isl.step_time,
        ema = sy.ema },
      syncer = { quorum = dp and 0 or quorum_value(r, Mn, 0), grace = grace, grace_gamma = sy.grace_gamma,
        ema = sy.ema, weighting = sy.weighting, merge = sy.merge, ring = sy.ring, codec_down = sy.codec_down,
        embedding = emb, timeout = 10 * isl.step_time,
        outer = { lr = r.outer.lr, momentum = r.outer.momentum, nesterov = r.outer.kind == "nesterov" } },
    })
    if not okv then fail_code(2, "%s", plain(vt)) end
    ctx.vt = vt
    local metrics, merr = diloco.metrics.open(ctx.rd.metrics_path)
    if not metrics then fail("%s", merr) end
    ctx.metrics = metrics
    ctx.recipe_json = diloco.json_encode(train.effective_recipe(r), { sort_keys = true })
    local wok, werr = ctx.rd:write_file("recipe.json",
      diloco.json_encode(train.effective_recipe(r), { sort_keys = true, indent = 2 }) .. "\n")
    if not wok then fail("writing the effective recipe: %s", werr) end
  end)
  if not ok then
    if ctx.metrics then ctx.metrics:close() end
    ctx.rd:close()
    error(err, 0)
  end
  ctx.log_every = r.log.every or math.max(1, r.steps // 20)
  if not opts.quiet then
    ctx.bar = diloco.progress.new { total = r.steps, every = ctx.log_every,
      unit = ctx.learners[1].loaders.kind == "text" and "tok" or "img", out = opts.progress_out }
    ctx.bar:print(string.format("%s: %d islands (%s), %s parameters, %s virtual seconds", r.name or "sim", Mn,
      sy.preset, diloco.progress.human(ctx.n_params), diloco.metrics.double_text(r.steps * isl.step_time)))
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

local function next_lr(ctx, L)
  local r = ctx.recipe
  local lr = r.inner.schedule and diloco.optim.lr_at(r.inner, L.lr_step, L.total)
  if r.hooks.lr then
    local v = call_hook("lr", r.hooks.lr, L.lr_step + 1, lr)
    if math.type(v) == nil or v ~= v or v < 0 or v > 3.4e38 then
      fail("hooks.lr(%d) returned %s: expected a finite learning rate >= 0 (a number)", L.lr_step + 1, tostring(v))
    end
    lr = v
  end
  return lr
end

local function report_step(ctx, L, ev, lv, gnorm, lr)
  L.steps, L.tokens = L.steps + 1, L.tokens + L.loaders.tokens_per_batch
  L.lr_step = L.lr_step + 1
  L.loss_ema = L.loss_ema and 0.9 * L.loss_ema + 0.1 * lv or lv
  if L.steps % ctx.log_every == 0 then
    write(ctx, "step", { learner = L.id, step = L.steps, loss = lv, lr = lr, grad_norm = gnorm, tokens = L.tokens,
      virtual_s = ev.time, wall_s = diloco.clock() - ctx.t_start })
  end
  local r = ctx.recipe
  if r.hooks.on_step then
    call_hook("on_step", r.hooks.on_step, { learner = L.id, step = L.steps, loss = lv, lr = lr, grad_norm = gnorm,
      tokens = L.tokens, virtual_s = ev.time })
  end
  if ctx.bar and L.id == 1 then
    local vstep = math.floor(ev.time / r.islands.step_time + 0.5)
    local wall = diloco.clock() - ctx.t_start
    ctx.bar:update({ step = vstep, loss = L.loss_ema, rate = ctx.total_tokens / math.max(wall, 1e-9),
      eta = (r.steps - vstep) * wall / math.max(vstep, 1), eval_loss = ctx.last_eval and ctx.last_eval.loss })
    if ctx.bar.failed then fail("%s", ctx.bar.failed) end
  end
end

local function dlcount(ctx) return #ctx.plan end

local function on_step_event(ctx, ev)
  local r, vt = ctx.recipe, ctx.vt
  local L = ctx.learners[ev.learner]
  local lr = next_lr(ctx, L)
  local x, y = L.loaders.train:next()
  L.params:zero_grad()
  local loss = L.model:loss(x, y)
  loss:backward()
  local lv = loss:item()
  loss:free()
  ctx.total_tokens = ctx.total_tokens + L.loaders.tokens_per_batch
  if r.sync.preset == "dp" then
    check_finite(ctx, L, lv)
    L.pending = { lr = lr, loss = lv }
    vt:gradient_done(ev.learner, L.loaders.tokens_per_batch)
    return
  end
  local gnorm = r.inner.clip > 0 and L.params:clip_grad_norm(r.inner.clip) or L.params:grad_norm()
  check_finite(ctx, L, lv, gnorm)
  L.opt:step(lr)
  if ctx.schedule then
    local due = call_hook("sync.schedule", ctx.schedule, L.id, L.steps + 1, dlcount(ctx))
    for _, p in ipairs(due or {}) do
      if math.type(p) ~= "integer" or p < 1 or p > dlcount(ctx) then
        fail("sync.schedule(%d, %d) returned fragment %s: expected integers in [1, %d]", L.id, L.steps + 1,
          tostring(p), dlcount(ctx))
      end
      vt:contribute(ev.learner, p)
    end
  end
  vt:step_done(ev.learner, L.loaders.tokens_per_batch)
  report_step(ctx, L, ev, lv, gnorm, lr)
end

local function on_optim_event(ctx, ev)
  local r = ctx.recipe
  local L = ctx.learners[ev.learner]
  local gnorm = r.inner.clip > 0 and L.params:clip_grad_norm(r.inner.clip) or L.params:grad_norm()
  check_finite(ctx, L, L.pending.loss, gnorm)
  L.opt:step(L.pending.lr)
  ctx.vt:optim_done(ev.learner)
  report_step(ctx, L, ev, L.pending.loss, gnorm, L.pending.lr)
end

local function on_merge(ctx, ev)
  local mi = ev.merge
  local contributors = {}
  for i, c in ipairs(mi.contributors) do
    contributors[i] = { learner = c.learner, weight = c.weight, staleness = c.staleness, steps = c.steps,
      tokens = c.tokens }
  end
  local info = { fragment = mi.fragment, version = mi.version, contributors = contributors, grace = mi.grace,
    waited = mi.waited, all_sent = mi.all_sent, flushed = mi.flushed or nil, live = mi.live, quorum = mi.quorum,
    bytes_in = mi.bytes_in, bytes_out = mi.bytes_out, virtual_s = ev.time }
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
    factor = ev.factor, reason = ev.reason, fragment = ev.fragment, virtual_s = ev.time }
  if ev.type == "fault" and ev.fault == "kill" and not ev.begin then
    -- the process restarted: a fresh inner optimizer (algorithm.md §4.7, no checkpoint of its own here)
    local L = ctx.learners[ev.learner]
    L.opt = diloco.optim.build(L.params, ctx.recipe.inner)
    info.optimizer = "fresh"
  end
  if info.duration == math.huge then info.duration = nil end
  write(ctx, ev.type == "reject" and "reject" or "fault", info)
  if ev.type ~= "reject" and ctx.recipe.hooks.on_fault then call_hook("on_fault", ctx.recipe.hooks.on_fault, info) end
  if ev.type ~= "reject" then requorum(ctx, ev) end
end

local function evaluate_global(ctx, final)
  ctx.vt:global(ctx.eval_params)
  local r = ctx.recipe
  local loaders = ctx.learners[1].loaders
  return train.evaluate(ctx.eval_model, loaders,
    final and loaders.kind == "images" and loaders.eval_batches_all or r.eval.batches)
end

local function on_eval(ctx, ev)
  local e = evaluate_global(ctx, false)
  e.step = math.floor(ev.time / ctx.recipe.islands.step_time + 0.5)
  ctx.last_eval = e
  write(ctx, "eval", { step = e.step, loss = e.loss, accuracy = e.accuracy, tokens = ctx.total_tokens,
    virtual_s = ev.time, wall_s = diloco.clock() - ctx.t_start })
  if ctx.recipe.hooks.on_eval then call_hook("on_eval", ctx.recipe.hooks.on_eval, e) end
  ctx:say_eval(e)
end

local function stop_reason(ctx)
  local name, signo = diloco.signal_pending()
  if name and not ctx.signal then ctx.signal, ctx.signo = name, signo end
  return ctx.signal
end

local function finish(ctx, err)
  local r = ctx.recipe
  if ctx.bar then ctx.bar:finish() end
  local final
  local ok, e = pcall(evaluate_global, ctx, true)
  if ok then
    final = e
    ctx.metrics:write("eval", { step = r.steps, loss = e.loss, accuracy = e.accuracy, tokens = ctx.total_tokens,
      virtual_s = ctx.vt:stats().virtual_s, wall_s = diloco.clock() - ctx.t_start, final = true })
  else
    err = err or string.format("final evaluation: %s", plain(e))
  end
  -- the global model, readable by `diloco-lua sample`
  local meta = { ["diloco.recipe"] = r.name or "", ["diloco.step"] = tostring(r.steps),
    ["diloco.recipe_json"] = ctx.recipe_json }
  if type(r.model) == "table" then meta["diloco.model"] = diloco.json_encode(r.model) end
  local sok, serr = pcall(ctx.vt.global, ctx.vt, ctx.eval_params)
  local saved
  if sok then
    saved, serr = diloco.save_safetensors(ctx.out .. "/model.safetensors", ctx.eval_plist, meta)
  end
  local save_error = not saved and string.format("saving the global model to %s: %s", ctx.out, plain(serr)) or nil
  stop_reason(ctx)
  if not err and ctx.metrics.failed then err = ctx.metrics.failed end
  if not err and save_error then err = save_error end
  local st = ctx.vt:stats()
  local steps, tokens, idle, per = 0, 0, {}, {}
  for m, l in ipairs(st.learners) do
    steps, tokens = steps + l.steps, tokens + l.tokens
    idle[m] = l.idle
    per[m] = { steps = l.steps, tokens = l.tokens, idle = l.idle, down = st.horizon > 0 and l.down_s / st.horizon or 0,
      merged = l.merged, bytes_up = l.bytes_up, bytes_down = l.bytes_down }
  end
  local wall = diloco.clock() - ctx.t_start
  local summary = {
    preset = r.sync.preset, learners = r.islands.count, steps = steps, tokens = tokens,
    final_eval_loss = final and final.loss, final_eval_accuracy = final and final.accuracy,
    goodput = st.goodput, uptime = st.uptime, bytes_up = st.bytes_up, bytes_down = st.bytes_down,
    wall_s = wall, virtual_s = st.virtual_s, idle = idle, train_s = wall, tokens_per_s = tokens / math.max(wall, 1e-9),
    params = ctx.n_params, interrupted = ctx.signal ~= nil, signal = ctx.signal, error = err, save_error = save_error,
    recipe = r.name, out = ctx.out, gemm = diloco.gemm_backend(), threads = diloco.num_threads(),
    merges = st.merges, rejects = st.rejects, faults = st.faults, dropped = st.dropped,
    useful_tokens = st.useful_tokens, bytes_by_type = st.bytes_by_type, per_learner = per,
  }
  ctx.metrics:write("summary", summary)
  local cok, cerr = ctx.metrics:close()
  if not cok and not err then
    err = cerr
    summary.error = err
  end
  ctx.rd:close()
  diloco.clear_signals()
  if ctx.bar and not ctx.bar.failed then
    ctx.bar:print(string.format("%s: %d islands, %d steps%s; goodput %.1f%%, uptime %.1f%%, %s up / %s down; %s",
      ctx.signal and ("stopped by " .. ctx.signal) or (err and "failed" or "done"), r.islands.count, steps,
      final and string.format(", global eval loss %.4f", final.loss) or "", 100 * st.goodput, 100 * st.uptime,
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
  ctx.total_tokens = 0
  ctx.say_eval = function(self, e)
    if self.bar then self.bar:print(string.format("eval at step %d: global loss %.4f", e.step, e.loss)) end
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
  local summary, err = finish(ctx, not ok_loop and plain(loop_err) or nil)
  if err then error({ diloco_error = tostring(err), code = 1, summary = summary }, 0) end
  return summary, ctx.signal ~= nil, ctx.signo
end

return M

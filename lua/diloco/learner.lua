-- diloco.learner: `diloco-lua learner RECIPE --connect HOST:PORT`, one island as a process
-- of its own, joined to a syncer over TCP (diloco.Learner: the learner driver of
-- rt/include/diloco/rt.h).
-- `diloco-lua run` starts M of them; any launcher can too (docs/cli.md).
--
--   local summary = diloco.learner.run(r, { connect = "10.0.0.5:7070", id = 2, out = "runs/x/learner-2",
--                                            secret_file = "runs/x/secret", run_id = "x-1f3a" })
--
-- The learner trains on its own shard (island `id` of islands.count) at its own pace: an
-- inner step, then step_done hands the arrived fragments to the state machine and sends
-- what is due.  It stops when its schedule step (its steps since it joined plus the run's
-- step it joined at) reaches `steps`, so a learner that rejoins late stops with the
-- others.  Its directory (OUT/learner-N) holds its own metrics (step, apply, checkpoint
-- and summary events) and checkpoints (its optimizer state, data cursor and schedule
-- step): a restarted learner takes the model from the syncer and the rest from its
-- newest checkpoint.  A step whose loss or parameters are not finite rolls the learner
-- back to the last global model (a `fault` event of kind `rollback`), so that nothing
-- non-finite reaches the syncer; more than ROLLBACKS_MAX of them in a row fail it.
-- Errors are the one type of diloco.train.
local diloco = require "diloco"
local train = require "diloco.train"
local island = require "diloco.island"
local runhost = require "diloco.runhost"
local summary_rec = require "diloco.summary"
local errors = require "diloco.errors"
local islands = require "diloco.islands"
local hook = islands.hook
local M = {}

local fail, fail_code, plain = train.fail, train.fail_code, train.plain
local ranks = require "diloco.ranks" -- an island of several MPI ranks
local send_ranks, stop_ranks = ranks.send, ranks.stop

-- Rollbacks in a row (every step since the first of them non-finite again, each from the
-- last global model with a fresh optimizer) after which the learner fails: then the
-- model, the learning rate or this island's data is broken, not one step.
M.ROLLBACKS_MAX = 5

-- Test only (docs/runtime.md): DILOCO_TEST_POISON = "ID:STEP[:TIMES[:WHEN]]" makes
-- learner ID write NaN into its first parameter tensor at the first inner step that would
-- end at schedule step STEP or later, TIMES times in a row (default 1; a rollback runs the step
-- again), WHEN "before" the step (default: its loss is then not finite) or "after" its
-- optimizer step (the parameter check finds it): a real non-finite model, to exercise
-- the rollback on real processes.  WHEN "batch" (data parallel only) leaves the model
-- alone and takes the step's loss as NaN, as a batch that overflowed would make it: the
-- void step (dp_step).  Nothing else reads it.
function M.poison_from(v)
  if not v or v == "" then return nil end
  local id, step, rest = v:match("^(%d+):(%d+)(.*)$")
  local times, when = (rest or ""):match("^:?(%d*):?(%a*)$")
  if not id or not times or (when ~= "" and when ~= "before" and when ~= "after" and when ~= "batch") then
    fail_code(2, "DILOCO_TEST_POISON = %q: expected ID:STEP, ID:STEP:TIMES or ID:STEP:TIMES:before|after|batch (a "
      .. "test-only variable)", v)
  end
  return { id = math.tointeger(tonumber(id)), step = math.tointeger(tonumber(step)),
    times = times ~= "" and math.tointeger(tonumber(times)) or 1, when = when ~= "" and when or "before" }
end

-- The learner's id: --id, else the launcher's rank (minus offset, for an MPMD line whose
-- first ranks are syncers), else nil (the syncer's WELCOME assigns one).  1-based.
function M.id_from(opts, env)
  env = env or os.getenv
  if opts.id then return opts.id end
  for _, k in ipairs { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID" } do
    local v = env(k)
    if v and v:match("^%d+$") then
      local id = math.tointeger(tonumber(v)) - (opts.rank_offset or 0) + 1
      if id < 1 then
        fail_code(2, "%s = %s with --rank-offset %d: this rank is not a learner (the syncer's?)", k, v,
          opts.rank_offset or 0)
      end
      return id
    end
  end
  return nil
end

-- A stop signal caught while the learner waits (for the address, the join, a round):
-- it ends at once, the exit status 128 + the signal's number, saying what it waited for.
function M.stopped_while(what)
  local sig, signo = diloco.signals.pending()
  if sig then error({ diloco_error = string.format("learner: stopped by %s while %s", sig, what), code = 128 + signo }, 0) end
end

-- "HOST:PORT", or @FILE: the address (and run id) a syncer wrote with --address-file,
-- waited for up to `wait` seconds (the syncer may start after its learners); or one of
-- them per syncer shard joined by commas (docs/shards.md): the addresses joined by
-- commas, and the run id of the first file that states one.
function M.resolve_connect(spec, wait)
  for _, sep in ipairs({ ",", "|" }) do -- shards joined by commas, each with its standbys after '|'
    if spec:find(sep, 1, true) then
      local addrs, run = {}, nil
      for item in (spec .. sep):gmatch("([^" .. sep .. "]*)" .. (sep == "|" and "%|" or sep)) do
        if item == "" then
          fail_code(2, "--connect %s: an empty address (expected one per shard, joined by commas, each with its "
            .. "standbys' after '|')", spec)
        end
        local a, fr = M.resolve_connect(item, wait)
        addrs[#addrs + 1] = a
        run = run or fr
      end
      return table.concat(addrs, sep), run
    end
  end
  if spec:sub(1, 1) ~= "@" then return spec, nil end
  local path = spec:sub(2)
  local t0 = diloco.clock()
  local said = false
  while true do
    local f = io.open(path, "r")
    if f then
      local text = f:read("a")
      f:close()
      local addr = text:match("^%s*(%S+:%d+)%s*\n")
      local run = text:match("\nrun%s+(%S+)")
      if addr then return addr, run end
    end
    if diloco.clock() - t0 > wait then
      fail_code(1, "--connect @%s: no address in the file after %g s (is the syncer running with --address-file %s?)",
        path, wait, path)
    end
    M.stopped_while("waiting for the syncer's address in " .. path)
    if not said and diloco.clock() - t0 >= 1 then -- a wait says what it waits for, and until when
      said = true
      io.stderr:write(string.format("diloco-lua: learner: waiting for the syncer's address in %s (up to %g s, "
        .. "runtime.join_timeout)\n", path, wait))
    end
    diloco.proc.sleep(0.1)
  end
end

local function write(ctx, event, fields) ctx:write(event, fields) end

-- Saves the learner's checkpoint (Island:save: its parameters, optimizer state, data
-- cursor, and its schedule step, learner id and run id).
local function save(ctx) ctx:save(ctx.lrt:schedule_step()) end

-- Why the checkpoint of metadata meta is not this learner's to restore: another learner's
-- or another run's (nil: it is, or it predates those keys).  ctx: id, run_id.
function M.foreign(ctx, meta)
  local l, run = meta["diloco.learner"], meta["diloco.run_id"]
  if l and l ~= tostring(ctx.id) then return string.format("it is learner %s's, this is learner %d", l, ctx.id) end
  if run and run ~= ctx.run_id then return string.format("it is run %s's, this is run %s", run, ctx.run_id) end
end

-- The optimizer state and data cursor of the newest checkpoint in OUT (the model comes
-- from the syncer).  Returns the checkpoint's path or nil.  restart_at = STEP: the
-- checkpoint of that schedule step, the model too (a non-elastic dp run restarts every
-- learner from the same one); one that is missing or does not fit is an error.
-- with_model: the newest checkpoint's model too (elastic dp, which then replays the
-- steps since: a dp syncer holds no model); ctx.restored_step is its schedule step.
local function restore(ctx, restart_at, with_model)
  local list = diloco.rundir.checkpoints(ctx.out)
  local last = list[#list]
  if restart_at then
    last = nil
    local have = {}
    for _, c in ipairs(list) do
      if c.step == restart_at then last = c end
      have[#have + 1] = tostring(c.step)
    end
    if not last then
      fail("learner %d: --restart-at %d: no checkpoint of step %d in %s (it holds steps: %s)", ctx.id, restart_at,
        restart_at, ctx.out, #have > 0 and table.concat(have, ", ") or "none")
    end
  end
  if not last then return nil end
  local meta, why = ctx:restore(last.path, { model = restart_at or with_model,
    check = function(m) return M.foreign(ctx, m) end })
  if not meta then
    if restart_at then fail("learner %d: --restart-at %d: %s: %s", ctx.id, restart_at, last.path, why) end
    ctx:warn("learner %d: %s not restored (%s): starting with a fresh optimizer%s", ctx.id, last.path, why,
      with_model and " from the initial model" or "")
    return nil
  end
  if why then ctx:warn("learner %d: %s: %s (its optimizer state restored, the data from its shard's start)", ctx.id,
    last.path, why) end
  ctx.restored_step, ctx.restored_model = last.step, (restart_at or with_model) and true or nil
  return last.path
end

-- Sets up the learner: its directory, model, optimizer, shard, and the connection.
-- opts: connect, id, out, secret_file, secret (from DILOCO_SECRET), run_id, quiet,
-- command, join_timeout, net (extra diloco.net.new options).
function M.prepare(r, opts)
  -- its context is its island (lua/diloco/island.lua): a learner's steps are logged at the last too
  local ctx = island.new(r, { opts = opts, wait_time = 0.0, last_step = r.steps })
  runhost.begin(r)
  local id = M.id_from(opts)
  local Mn = r.islands.count
  if id and (id < 1 or id > Mn) then
    fail_code(2, "--id %d: this recipe has islands.count = %d: expected 1..%d", id, Mn, Mn)
  end
  local rt = require("diloco.cluster").runtime(r)
  ctx.rt = rt
  local addr, file_run = M.resolve_connect(opts.connect, rt.join_timeout)
  ctx.addr = addr
  ctx.run_id = opts.run_id or file_run or (r.name or "run")
  runhost.recipe_files(ctx) -- (its checkpoints' metadata)
  ctx:build()
  ctx.plan = islands.plan(r, ctx.params, #ctx.plist)
  local lopts, sopts, run_json = islands.sync_options(r, ctx.plist, rt.heartbeat, 0)
  ctx.dp = r.sync.preset == "dp"
  -- the send queue holds about two models' worth of contributions: past that a slow syncer
  -- gets back-pressure, and the learner holds (then drops the oldest of) what it could not send
  local out_max = math.max(16 << 20, 2 * 4 * ctx.params:numel() + (1 << 20))
  local net = { secret_file = opts.secret_file, secret = opts.secret, timeout = rt.timeout, heartbeat = rt.heartbeat,
    out_max = out_max, tls = opts.tls,
    -- with standbys (A|B) at most 1 s between rounds of reconnects: one takes over in its lease
    reconnect_max = addr:find("|", 1, true) and 1 or nil }
  -- a process's incarnation: its start in milliseconds, so each restart's is larger and the
  -- syncer never merges what an earlier one of the same learner still had in flight
  local incarnation = math.max(1, math.floor(diloco.wall_time() * 1000))
  -- (connected and joined on return, the whole model here, or a refusal or deadline named)
  if not opts.quiet then -- a wait says what it waits for, and until when
    io.stderr:write(string.format("diloco-lua: learner%s: joining the syncer at %s (up to %g s, runtime.join_timeout)\n",
      id and (" " .. id) or "", addr, rt.join_timeout))
    io.stderr:flush()
  end
  local l, err = diloco.Learner { params = ctx.params, plan = ctx.plan, learner = lopts, syncer = sopts,
    run_json = run_json, id = id,
    incarnation = incarnation, connect = addr, join_timeout = rt.join_timeout,
    run = ctx.run_id, net = net, inline_codec = not rt.codec_thread }
  if not l then
    M.stopped_while(string.format("joining the syncer at %s", addr))
    fail("learner: joining the syncer at %s: %s", addr, err)
  end
  ctx.lrt = l
  -- its link to the syncer: the rt learner driver's calls
  ctx.link = { contribute = function(p) l:contribute(p) end,
    step_done = function(tokens, seconds) l:step_done(tokens, seconds) end }
  ctx.fragments = #ctx.plan
  ctx.id = l:id()
  ctx.island = r.islands.list[ctx.id]
  ctx.state_meta = { ["diloco.learner"] = tostring(ctx.id), ["diloco.run_id"] = ctx.run_id }
  local okd, loaders = ctx:open_data(ctx.island.batch * (opts.ranks or 1), ctx.island.shard, Mn)
  if not okd then
    l:close()
    fail("data (island %d): %s", ctx.id, plain(loaders))
  end
  ctx.out = opts.out or string.format("%s/learner-%d", r.out or ("runs/" .. (r.name or "run")), ctx.id)
  -- its own directory: continued when it holds a checkpoint (a restart), else made new;
  -- --overwrite (a fresh run) replaces what it holds
  local has = not opts.overwrite and #diloco.rundir.checkpoints(ctx.out) > 0
  -- (a restart without a checkpoint yet appends to what its earlier process wrote)
  ctx.rd = diloco.rundir.open(ctx.out, { resume = has and "latest" or nil, overwrite = opts.overwrite,
    append = not opts.overwrite and not has or nil, metrics = opts.metrics, command = opts.command,
    keep = r.checkpoint.keep })
  local metrics, merr = diloco.metrics.open(ctx.rd.metrics_path, { append = ctx.rd.append })
  if not metrics then fail("%s", merr) end
  ctx.metrics = metrics
  if opts.restart_at then
    -- a rollback of the whole run (non-elastic dp): the model, optimizer, data cursor
    -- and schedule step of the checkpoint of that step (0: the initial model, as at the
    -- start), not the syncer's model (a dp syncer holds none)
    ctx.restored = opts.restart_at > 0 and restore(ctx, opts.restart_at) or nil
    local sok, serr = pcall(l.set_schedule_step, l, opts.restart_at)
    if not sok then fail("learner %d: --restart-at %d: %s", ctx.id, opts.restart_at, plain(serr)) end
  elseif ctx.dp and rt.elastic and l:replays() then
    -- elastic data parallel: the model, optimizer and data cursor of its newest checkpoint
    -- (none: the initial model the join brought, at step 0), then the averages of the
    -- steps the others took since, replayed through its optimizer (train, below): it then
    -- holds the very model the others hold (a dp syncer holds none to send)
    ctx.restored = has and restore(ctx, nil, true) or nil
    local sok, serr = pcall(l.set_schedule_step, l, ctx.restored and ctx.restored_step or 0)
    if not sok then fail("learner %d: restoring %s: %s", ctx.id, ctx.restored or "the initial model", plain(serr)) end
    l:replay()
  else
    ctx.restored = has and restore(ctx) or nil
    -- joined past the start without a checkpoint (a restart, a late launch): its text data
    -- goes on from the batch its island reaches at the run's step, not from the start of
    -- its shard again (its earlier processes read the batches before; a checkpoint's
    -- cursor is exact, this is the island's schedule)
    local s = l:schedule_step()
    if not ctx.restored and s > 0 and ctx.loaders.train:state().cursor then
      ctx.loaders.train:set_state({ cursor = s })
      ctx.data_cursor = s
    end
  end
  ctx.log_every = r.log.every or math.max(1, r.steps // 20)
  ctx.last_save = diloco.clock()
  ctx.first_step = l:schedule_step()
  local poison = M.poison_from(os.getenv("DILOCO_TEST_POISON"))
  if poison and poison.id == ctx.id then ctx.poison = poison end
  ctx.rollbacks, ctx.rollbacks_in_a_row = 0, 0
  -- startup_s: from the process's start to here (joined, restored): what a restart costs
  -- before its first step; tokens: what its checkpoint had trained (the counters go on from it)
  write(ctx, "join", { learner = ctx.id, step = ctx.first_step, connect = addr, restored = ctx.restored,
    optimizer = ctx.restored and "checkpoint" or "fresh", tokens = ctx.tokens, restart_at = opts.restart_at,
    data_cursor = ctx.data_cursor,
    startup_s = diloco.clock() - ctx.t_start })
  if not opts.quiet then -- what it continues from: its own checkpoint, or nothing of before
    if ctx.restored then
      ctx:warn("learner %d: restored its optimizer state, data position and %s tokens from %s (step %d)%s", ctx.id,
        diloco.progress.human(ctx.tokens), ctx.restored, ctx.restored_step or 0,
        ctx.restored_model and ", the model too" or "; the model comes from the syncer")
    else
      ctx:warn("learner %d: nothing restored: a fresh optimizer, its data from %s", ctx.id,
        ctx.data_cursor and string.format("the run's step %d", ctx.data_cursor) or "the start of its shard")
    end
  end
  return ctx
end

local function drain_events(ctx)
  while true do
    local ev = ctx.lrt:poll()
    if not ev then return end
    if ev.type == "applied" then
      if ctx.mpi then -- the island's other ranks take it at the next step (send_ranks)
        if ev.resync then ctx.ranks_whole = true else ctx.ranks_frags[ev.fragment] = true end
      end
      write(ctx, "apply", { learner = ctx.id, fragment = ev.fragment, version = ev.version, step = ctx.lrt:schedule_step(),
        boundary = ev.boundary, lag = ev.lag, resync = ev.resync or nil })
    elseif ev.type == "phase" or ev.type == "room" then -- its schedule moved, or its sends waited: on the tape
      write(ctx, ev.type, { learner = ctx.id, fragment = ev.fragment, lag = ev.lag, boundary = ev.boundary,
        step = ev.schedule, unreplayed = ev.unreplayed, room = ev.room })
      if ev.unreplayed and not ctx.opts.quiet then
        ctx:warn("learner %d: the syncer no longer holds the averaged gradients of %d steps before step %d (its "
          .. "history is sync.dp_history steps, and a restarted syncer holds none): skipped, so this learner's model "
          .. "now differs from the others'", ctx.id, ev.unreplayed, ev.schedule + 1)
      end
    else
      local step = ctx.lrt:schedule_step()
      write(ctx, ev.type, { learner = ctx.id, text = ev.text, step = step })
      if not ctx.opts.quiet then ctx:warn("learner %d: %s (%s)", ctx.id, ev.type, ev.text) end
      -- since when it trains unheard (undelivered, at its end); back: delivered again
      if ev.type == "disconnected" then
        ctx.lost = ctx.lost or { step = step, t = diloco.clock(), text = ev.text }
      elseif ev.type == "connected" then
        ctx.lost = nil
      end
    end
  end
end

-- A stop signal ends the wait at once (dlc_lrt_config.interrupted): then "stop", and the
-- step is left unfinished (dp: its gradient not applied) for the loop to stop.
local SAY_WAIT_AFTER = 5 -- s: a round's wait that lasts longer says what it waits for
local function wait_merge(ctx)
  local t0, limit = diloco.clock(), ctx.opts.wait_timeout or 600
  local ok, err = ctx.lrt:wait(math.min(SAY_WAIT_AFTER, limit))
  -- its first SAY_WAIT_AFTER s ran out (rt/lrt.c's deadline: "no ... from the syncer at
  -- ... within N s"; a refusal or a signal is not that): say so once, and wait the rest
  if not ok and limit > SAY_WAIT_AFTER and not diloco.signals.pending()
      and tostring(err):find("^learner %d+: no .- from the syncer at .- within [%d%.]+ s") then
    if not ctx.opts.quiet then
      ctx:warn("learner %d: waiting for the round's %s (%s), until %s", ctx.id,
        ctx.dp and "averaged gradient" or "merge", ctx.dp and "data parallel: every learner's gradient of the step"
        or "a blocking preset: every learner's contribution", os.date("%H:%M:%S", math.floor(diloco.wall_time()
        + limit - (diloco.clock() - t0))))
    end
    ok, err = ctx.lrt:wait(math.max(limit - (diloco.clock() - t0), 0.001))
  end
  ctx.wait_time = ctx.wait_time + (diloco.clock() - t0)
  if not ok then
    if diloco.signals.pending() then return "stop" end
    fail("learner %d: %s", ctx.id, err)
  end
  return err == true
end

-- dp: catches up on the averaged gradients of the steps it missed (a restart, or a
-- gradient refused for a step the others had passed): its optimizer on each, with the
-- clip and learning rate of that step as dp_step runs them, no forward or backward pass.
local function replay(ctx)
  local l, r = ctx.lrt, ctx.recipe
  local t0, from, n = diloco.clock(), l:schedule_step(), 0
  while true do
    local on, ready = l:replaying()
    if not on then break end
    if not ready then
      if wait_merge(ctx) == "stop" then break end -- (the loop stops at its top)
      on, ready = l:replaying()
    end
    if ready then
      ctx:dp_apply(island.lr_at(r, l:schedule_step(), r.steps))
      l:replayed()
      n = n + 1
    end
  end
  ctx.replay_s = (ctx.replay_s or 0) + (diloco.clock() - t0)
  if n > 0 then
    write(ctx, "replay", { learner = ctx.id, from = from, step = l:schedule_step(), steps = n,
      seconds = diloco.clock() - t0 })
  end
end

-- One data-parallel step: forward and backward, the gradient averaged by the syncer,
-- then clip and the optimizer step.  A step whose loss or gradient is not finite while
-- the model is (a batch that overflowed) is void: its gradient goes out as zeros with no
-- tokens, which the syncer leaves out of the average, and the learner applies the
-- others' average as they do, so its model stays theirs (a `fault` event of kind
-- `rollback` with `void`; more than ROLLBACKS_MAX in a row fail it).  A non-finite model
-- fails the learner: `run` restarts it from its checkpoint and the replay.
local dp_void -- (below)
local function dp_step(ctx)
  local r, loaders = ctx.recipe, ctx.loaders
  local t0 = diloco.clock()
  local lv, lr = ctx:dp_gradient()
  local p = ctx.poison
  if p and p.when == "batch" and p.times > 0 and ctx.lrt:schedule_step() + 1 >= p.step then
    p.times, lv = p.times - 1, 0 / 0
  end
  local bad
  if lv ~= lv or math.abs(lv) == math.huge then
    bad = { cause = "loss", loss = lv }
  else
    local gn = ctx.params:grad_norm()
    if gn ~= gn or math.abs(gn) == math.huge then bad = { cause = "gradient", loss = lv, grad_norm = gn } end
  end
  local compute = diloco.clock() - t0
  if bad then dp_void(ctx, bad) end
  ctx.lrt:gradient(bad and 0 or loaders.tokens_per_batch)
  if wait_merge(ctx) then -- resynced (the model is the syncer's) or stopped: this step is void
    ctx.train_time = ctx.train_time + compute
    return nil, compute
  end
  t0 = diloco.clock()
  local gnorm = ctx:dp_apply(lr)
  compute = compute + (diloco.clock() - t0)
  ctx.train_time = ctx.train_time + compute
  if bad then return { lr = lr, grad_norm = gnorm, void = true }, compute end
  ctx.rollbacks_in_a_row = 0
  ctx.tokens = ctx.tokens + loaders.tokens_per_batch
  ctx.tok_window = ctx.tok_window + loaders.tokens_per_batch
  ctx.loss_ema = ctx.loss_ema and (0.9 * ctx.loss_ema + 0.1 * lv) or lv
  return { loss = lv, grad_norm = gnorm, lr = lr }, compute
end

-- A number for JSON, which has no NaN or infinity: those as strings.
local function json_num(v)
  if v == nil or (v == v and math.abs(v) ~= math.huge) then return v end
  return v ~= v and "nan" or (v > 0 and "inf" or "-inf")
end

-- DILOCO_TEST_POISON (test only, above): NaN into the first parameter tensor.
local function maybe_poison(ctx, when)
  local p = ctx.poison
  -- the first step at or past STEP (a learner that catches up may skip the step itself)
  if not p or p.when ~= when or p.times < 1 or ctx.lrt:schedule_step() + 1 < p.step then return end
  p.times = p.times - 1
  ctx.plist[1][2]:fill(0 / 0)
end

-- A number as text, nan and infinities spelt as in JSON strings (json_num).
local function num_text(v)
  local j = json_num(v)
  return type(j) == "string" and j or string.format("%.6g", v)
end

-- A step went non-finite (bad: cause, and the loss, gradient norm or parameter) and was
-- undone (how: `extra`'s fields): counted, a fault event of kind `rollback`, the hook,
-- and the learner fails after more than ROLLBACKS_MAX in a row.
local function note_rollback(ctx, bad, compute, extra)
  local r, step = ctx.recipe, ctx.lrt:schedule_step() + 1
  ctx.rollbacks, ctx.rollbacks_in_a_row = ctx.rollbacks + 1, ctx.rollbacks_in_a_row + 1
  ctx.train_time = ctx.train_time + compute
  local info = { kind = "rollback", learner = ctx.id, step = step, cause = bad.cause, loss = json_num(bad.loss),
    grad_norm = json_num(bad.grad_norm), parameter = bad.parameter, index = bad.index, value = json_num(bad.value),
    text = bad.text, in_a_row = ctx.rollbacks_in_a_row, rollbacks = ctx.rollbacks,
    wall_s = diloco.clock() - ctx.t_start }
  for k, v in pairs(extra or {}) do info[k] = v end
  write(ctx, "fault", info)
  if not ctx.opts.quiet then ctx:warn("learner %d: step %d: %s: %s", ctx.id, step, bad.text, extra and extra.void
    and "a void step (its gradient left out of the average)" or "rolled back to the last global model") end
  if r.hooks.on_fault then hook("on_fault", r.hooks.on_fault, info) end
  if ctx.rollbacks_in_a_row > M.ROLLBACKS_MAX then
    fail("learner %d: %d rollbacks in a row, more than diloco.learner.ROLLBACKS_MAX = %d (%s went non-finite each "
      .. "time, the last at step %d: %s): lower inner.lr (%g) or check island %d's data", ctx.id, ctx.rollbacks_in_a_row,
      M.ROLLBACKS_MAX, extra and extra.void and "its steps on the others' model" or
      "steps from the last global model with a fresh optimizer", step, bad.text, r.inner.lr, ctx.id)
  end
end

-- The step that would end at schedule step `step` went non-finite: the model goes back
-- to the last global model, the optimizer starts afresh (its moments describe, or hold,
-- what went wrong), the step is not reported (it trained nothing), a fault event says so.
local function rollback(ctx, bad, compute)
  local l, r = ctx.lrt, ctx.recipe
  local ok, err = l:rollback()
  if not ok then fail("learner %d, step %d: %s; the rollback to the last global model failed: %s", ctx.id,
    l:schedule_step() + 1, bad.text, err) end
  ctx:fresh_optimizer()
  ctx.ranks_whole, ctx.ranks_fresh = true, true -- the island's other ranks: the same model, a fresh optimizer
  note_rollback(ctx, bad, compute)
end

-- dp: the step's loss or gradient is not finite (bad).  Its model must still be the
-- others' (finite), or nothing but a restart (a checkpoint and the replay) brings it back;
-- its gradient goes out as zeros, with no tokens (dp_step).  compute is counted by
-- dp_step, with the rest of the step.
dp_void = function(ctx, bad)
  local msg = ctx.lrt:nonfinite()
  if msg then
    fail("learner %d, step %d: training diverged (%s %s, and %s), the update was not applied (a data-parallel model "
      .. "that is no longer the others' comes back by a restart: its checkpoint and the replay)", ctx.id,
      ctx.lrt:schedule_step() + 1, bad.cause, num_text(bad.cause == "loss" and bad.loss or bad.grad_norm), msg)
  end
  bad.text = bad.cause == "loss" and string.format("loss %s", num_text(bad.loss))
    or string.format("loss %s, gradient norm %s", num_text(bad.loss), num_text(bad.grad_norm))
  ctx.params:zero_grad()
  note_rollback(ctx, bad, 0, { void = true })
end

-- One inner step (not dp) with its check: returns the step's info, or nil after a
-- rollback.  Only a finite model reaches step_done, so nothing non-finite is sent.
local function checked_step(ctx)
  local t0 = diloco.clock()
  maybe_poison(ctx, "before")
  local ok, res = pcall(ctx.inner_step, ctx)
  local compute = diloco.clock() - t0
  if ok then maybe_poison(ctx, "after") end
  if not ok then
    if type(res) ~= "table" or not res.nonfinite then error(res, 0) end
    local nf = res.nonfinite
    rollback(ctx, { cause = "loss", loss = nf.loss, grad_norm = nf.grad_norm,
      text = string.format("loss %s, gradient norm %s", num_text(nf.loss), num_text(nf.grad_norm)) }, compute)
    return nil, compute
  end
  local msg, tensor, index, value = ctx.lrt:nonfinite()
  if msg then
    rollback(ctx, { cause = "parameter", loss = res.loss, parameter = ctx.plist[tensor][1], index = index,
      value = value, text = msg }, compute)
    return nil, compute
  end
  ctx.rollbacks_in_a_row = 0
  return res, compute
end

local stop_reason = island.stop_reason

-- The loop: until the schedule step reaches `steps`, or a signal.
function M.train(ctx)
  local r, l = ctx.recipe, ctx.lrt
  local tpb = ctx.loaders.tokens_per_batch
  while l:schedule_step() < r.steps do
    if stop_reason(ctx) then break end
    if ctx.mpi then send_ranks(ctx) end -- an island of several ranks: the step to run, the model's changes
    if ctx.dp and l:replaying() then
      replay(ctx)
      drain_events(ctx)
      if l:schedule_step() >= r.steps or stop_reason(ctx) then break end
    end
    ctx.step = l:schedule_step() -- the run's step: the learning-rate schedule follows it
    local info, compute
    if ctx.dp then
      info, compute = dp_step(ctx)
      if info then ctx.link.step_done(info.void and 0 or tpb, compute) end
    else
      info, compute = checked_step(ctx)
      if info then ctx:step_done(ctx.step, tpb, compute) end
      if l:state() == "waiting" then wait_merge(ctx) end
    end
    drain_events(ctx)
    if not info then goto continue end -- a dp step its resync voided, or a rollback: run it again
    local step = l:schedule_step()
    -- (a void dp step, its own gradient left out, trained nothing of its own to report)
    if not info.void then
      -- sent_s, sent_steps, overwritten_s, kept_s: this process's so far (its account): a
      -- killed process writes no summary, and `run`'s account takes these from its last
      -- step event
      ctx:report(step, info, function()
        local a = l:account()
        return { wait_s = ctx.wait_time, train_s = ctx.train_time, sent_s = a.sent_s, sent_steps = a.sent_steps,
          overwritten_s = a.overwritten_s, kept_s = a.kept_s }
      end)
    end
    if ctx:checkpoint_due(step) then save(ctx) end
    ::continue::
  end
  stop_reason(ctx)
  if ctx.mpi then stop_ranks(ctx) end
end

-- A learner that trained to its end without the syncer (gone, stopped, or its id taken
-- by another process) did not do what it was asked: what it trained since is in its
-- checkpoint, not in the run's model.  nil when it is connected at its end; else the
-- error (exit status 3, errors.EXIT.undelivered), naming since when and why.
local function undelivered(ctx)
  local okst, st = pcall(ctx.lrt.stats, ctx.lrt)
  if not okst or st.connected then return nil end
  local lost, step = ctx.lost, ctx.lrt:schedule_step()
  ctx.exit_code, ctx.undelivered_steps = errors.EXIT.undelivered, lost and step - lost.step or step
  local why = lost and string.format("since step %d (%.1f s ago: %s)", lost.step, diloco.clock() - lost.t, lost.text)
    or "since its join"
  local refusal = ctx.lrt:last_refusal():gsub(" %(none%)$", "")
  if refusal ~= "" and (not lost or refusal ~= lost.text) then why = why .. "; its reconnects: " .. refusal end
  return string.format("learner %d: trained to step %d, but the syncer at %s has been unreachable %s: its last %d "
    .. "steps were never merged (they are in its checkpoint, not in the run's model)", ctx.id, step, ctx.addr, why,
    ctx.undelivered_steps)
end

-- The end: the last contributions merged (or the drain deadline), BYE, a checkpoint,
-- the learner's summary.
function M.finish(ctx, err)
  local r = ctx.recipe
  local why = err and "failed" or (ctx.signal and ("stopped by " .. ctx.signal) or "finished")
  if ctx.lrt then
    local drain = ctx.rt.drain
    if not err and not ctx.dp and r.sync.final_flush then
      -- the final flush: what it trained since its last sends, merged before the final eval
      local ok, n = pcall(ctx.lrt.flush, ctx.lrt)
      if ok and n > 0 then write(ctx, "flush", { learner = ctx.id, fragments = n, step = ctx.lrt:schedule_step() }) end
    end
    local okb, before = pcall(ctx.lrt.account, ctx.lrt)
    ctx.account_before = okb and before or nil
    pcall(drain_events, ctx)
    -- a syncer with a standby (--connect A|B) may be taking over right now: its end waits
    -- for it (up to runtime.drain) before it calls its last steps undelivered
    local t_wait = diloco.clock()
    while not err and not ctx.signal and drain > 0 and ctx.addr:find("|", 1, true) and
        diloco.clock() - t_wait < drain do
      local okst, st = pcall(ctx.lrt.stats, ctx.lrt)
      if not okst or st.connected or diloco.signals.pending() then break end
      pcall(ctx.lrt.pump, ctx.lrt, 0.05) -- (the reconnect happens in here: nothing else takes it now)
      pcall(drain_events, ctx)
    end
    if not err and not ctx.signal then err = undelivered(ctx) end
    -- the drain says what it waits for and until when; the signal that stopped the learner
    -- is ctx.signal's, so another ends the drain at once (dlc_lrt_config.interrupted)
    local okn, n = pcall(ctx.lrt.outstanding, ctx.lrt)
    if not err and drain > 0 and okn and n > 0 and not ctx.opts.quiet then
      ctx:warn("learner %d: waiting for the merge of its last %d contribution%s, until %s (runtime.drain = %g s; "
        .. "a signal leaves at once)", ctx.id, n, n == 1 and "" or "s", os.date("%H:%M:%S",
          math.floor(diloco.wall_time() + drain)), drain)
    end
    local sig, signo = diloco.signals.pending()
    if sig and not ctx.signal then ctx.signal, ctx.signo = sig, signo end
    diloco.signals.clear()
    pcall(ctx.lrt.finish, ctx.lrt, err and 0 or drain, why)
    sig, signo = diloco.signals.pending() -- one that ended the drain stopped the learner too
    if sig and not ctx.signal then ctx.signal, ctx.signo = sig, signo end
    pcall(drain_events, ctx)
  end
  if ctx.lrt and ctx.rd then save(ctx) end
  local st = ctx.lrt and ctx.lrt:stats() or {}
  local okacc, account = pcall(function() return ctx.lrt and ctx.lrt:account() end)
  -- what its end stopped unsent is unsent, not discarded (a stop discards, learner.h)
  local b = ctx.account_before
  if okacc and account and b then
    for _, u in ipairs { "steps", "s" } do
      local moved = account["discarded_" .. u] - b["discarded_" .. u]
      account["discarded_" .. u], account["unsent_" .. u] = b["discarded_" .. u], account["unsent_" .. u] + moved
    end
  end
  local wall = diloco.clock() - ctx.t_start
  local summary = { learner = ctx.id, preset = r.sync.preset, steps = st.steps, schedule_step = ctx.lrt and
    ctx.lrt:schedule_step(), tokens = ctx.tokens, wall_s = wall, train_s = ctx.train_time, wait_s = ctx.wait_time,
    wait_share = ctx.wait_time / math.max(wall, 1e-9), step_done_s = st.call_s, encode_wait_s = st.encode_wait_s,
    encoded = st.encoded, decoded = st.decoded,
    tokens_per_s = ctx.tokens / math.max(ctx.train_time + ctx.wait_time, 1e-9), bytes_up = st.bytes_out,
    bytes_down = st.bytes_in, sent = st.sent, held = st.held, held_dropped = st.held_dropped,
    held_superseded = st.held_superseded, deferred = st.deferred, applied = st.applied, reconnects = st.reconnects,
    rollbacks = ctx.rollbacks, replayed = ctx.dp and st.replayed or nil,
    unreplayed = ctx.dp and st.unreplayed or nil, replay_s = ctx.replay_s, account = okacc and account or nil,
    save_error = ctx.save_error, checkpoint = ctx.checkpoint, undelivered_steps = ctx.undelivered_steps,
    ranks = ctx.ranks, ranks_same = ctx.ranks_same, ranks_sync_s = ctx.ranks_sync_s,
    allreduce_s = ctx.ranks and diloco.mpi.stats().allreduce_s or nil,
    allreduce_share = ctx.ranks and diloco.mpi.stats().allreduce_s / math.max(ctx.train_time, 1e-9) or nil }
  summary, err = summary_rec.finish(ctx, summary, { err = err })
  if ctx.lrt then ctx.lrt:close() end
  if ctx.rd then ctx.rd:close() end
  diloco.signals.clear()
  return summary, err
end

-- Runs one learner (see the top of the file).  Returns summary, interrupted, signo; a
-- failed learner writes its summary, then raises the one error type with code 1.
function M.run(r, opts)
  local R = ranks.island_ranks(r, opts)
  if R then
    local rank, size = diloco.mpi.init()
    if size ~= R then
      fail_code(2, "learner %d: the launcher's environment says %d ranks, MPI says %d", opts.id, R, size)
    end
    ranks.write_rank_pid(r, opts, rank)
    if rank > 0 then return ranks.run_rank(r, opts, rank, size) end
    opts = setmetatable({ ranks = R }, { __index = opts })
  end
  local ctx = M.prepare(r, opts)
  if R then
    ctx.mpi, ctx.ranks, ctx.flat, ctx.ranks_frags = true, R, ctx.params:flat(), {}
    ctx.rows = { 1, ctx.island.batch }
    ctx.grad_seed = 1 / R
    ctx.reduce_loss = diloco.mpi.mean
    ctx.reduce = function() diloco.mpi.average_grads(ctx.params, true) end
  end
  local ok, loop_err = pcall(M.train, ctx)
  local summary, err = M.finish(ctx, not ok and train.loop_error(loop_err) or nil)
  -- the island's ranks stopped together (stop_ranks): MPI ends cleanly; otherwise this
  -- process's exit ends the job, and mpirun takes the other ranks down
  if R and ctx.ranks_same ~= nil then diloco.mpi.finalize() end
  if err then error({ diloco_error = tostring(err), code = ctx.exit_code or 1, summary = summary,
    hook_traceback = type(loop_err) == "table" and loop_err.hook_traceback or nil }, 0) end
  return summary, ctx.signal ~= nil, ctx.signo
end

return M

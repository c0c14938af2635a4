-- diloco.cluster: the syncer of a real run, its host: it starts the syncer (and again after a
-- fault, from its checkpoint), takes its events into the run's metrics and account,
-- evaluates and saves the global model, and runs the loop that the supervisor of the
-- learner processes (lua/diloco/supervisor.lua) and the display (lua/diloco/runview.lua)
-- take their turns in; what they share is lua/diloco/runctx.lua.
--
--   diloco-lua run RECIPE      (islands.count > 1)  M.run: the syncer in this process,
--                              M learner processes (diloco-lua learner, exec'd), chaos
--   diloco-lua syncer RECIPE --listen HOST:PORT     M.serve: the syncer alone, learners
--                              started by any launcher (--shard I/S: one shard of it)
-- islands.syncers = S: the syncer in S shards in this process (lua/diloco/shards.lua).
--
-- OUT holds what `sim` writes (metrics.jsonl with merge, fault, eval and summary events
-- in sim's schema, recipe.json, model.safetensors: the global model), plus learner-N/
-- (each learner's own metrics, checkpoints and log) and secret (the run's secret, mode
-- 0600, handed to the learners by file).  docs/runtime.md.
local diloco = require "diloco"
local train = require "diloco.train"
local isl_host = require "diloco.island"
local runhost = require "diloco.runhost"
local islands = require "diloco.islands"
local hook = islands.hook
local rc = require "diloco.runctx"
local sup = require "diloco.supervisor"
local view = require "diloco.runview"
local past = require "diloco.runpast"
local M = {}

local fail, fail_code, plain = train.fail, train.fail_code, train.plain
local write, median, elapsed, island, say, run_step, fault = rc.write, rc.median, rc.elapsed, rc.island, rc.say,
  rc.run_step, rc.fault
local signal_learner = sup.signal_learner
local display, learner_progress, tokens_so_far = view.display, view.learner_progress, view.tokens_so_far

-- The runtime section's durations in seconds.
function M.runtime(r)
  local rt, pd = r.runtime, diloco.recipe.parse_duration
  return { heartbeat = pd(rt.heartbeat) + 0.0, timeout = pd(rt.timeout) + 0.0, join_timeout = pd(rt.join_timeout) + 0.0,
    start_timeout = pd(rt.start_timeout) + 0.0, drain = pd(rt.drain) + 0.0, restarts = rt.restarts,
    refusals = pd(rt.refusals) + 0.0,
    syncer_every = rt.syncer_every, elastic = rt.elastic, emulate_links = rt.emulate_links,
    codec_thread = rt.codec_thread }
end

local function random_hex(n)
  local f = assert(io.open("/dev/urandom", "rb"))
  local b = f:read(n)
  f:close()
  return (b:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end



-- ---- the syncer ----

-- Starts the syncer driver on `listen`, new or from the checkpoint at `resume`.
-- The epoch record OUT/syncer/epoch: written before every start of a syncer over this
-- run directory, so each start stamps a later epoch than any before it, also after an
-- incarnation that died before its first checkpoint (which the checkpoint's epoch + 1
-- alone would repeat).  Returns the epoch to start with (nil: the checkpoint's + 1, for a
-- run directory from before the record).
local function next_epoch(ctx, resume)
  local f = io.open(ctx.srd.out .. "/epoch", "r")
  local last = f and math.tointeger(tonumber(f:read("l") or "")) or nil
  if f then f:close() end
  if resume and not last then return nil end
  local e = resume and last + 1 or 1
  local ok, err = ctx.srd:write_file("epoch", tostring(e) .. "\n")
  if not ok then fail("the syncer's epoch record: %s", err) end
  return e
end

function M.start_syncer(ctx, listen, resume)
  local r = ctx.recipe
  local epoch = next_epoch(ctx, resume)
  local o = { params = ctx.params, plan = ctx.plan, learners = r.islands.count,
    learner = ctx.lopts, syncer = ctx.sopts, run_json = ctx.run_json, listen = listen, run = ctx.run_id, resume = resume, epoch = epoch,
    shard = ctx.opts.shard, shards = ctx.opts.shards, -- (docs/shards.md)
    standby_of = ctx.opts.standby_of, lease = ctx.opts.lease, -- (none: the net's timeout, runtime.timeout)
    -- the run's first syncer lets its learners start together (rt.h, the start gate); a
    -- later one (a restart, a rollback, the end) serves a run under way
    start_learners = not ctx.syncer_started and ctx.rt.start_timeout > 0 and r.islands.count or 0,
    start_timeout = ctx.rt.start_timeout, refusals_every = ctx.rt.refusals,
    net = { secret_file = ctx.secret_file, secret = ctx.opts.secret, timeout = ctx.rt.timeout,
      heartbeat = ctx.rt.heartbeat, tls = ctx.opts.tls,
      -- every learner of a run on one host comes from one address, all at once
      max_unauth_per_addr = math.max(8, r.islands.count) } }
  -- islands.syncers = S: S shards in this process (a launcher's --shard serves one)
  local S = not ctx.opts.shards and r.islands.syncers or 1
  local s, serr
  -- islands.standbys: each shard (or the one syncer) with a standby in this process
  local standbys = r.islands.standbys and not ctx.opts.shards and not ctx.opts.standby_of
  if S > 1 or standbys then s, serr = require("diloco.shards").start(o, S, standbys) else s, serr = diloco.Syncer(o) end
  if not s then fail_code(resume and 1 or 2, "syncer: %s", serr) end
  ctx.syncer_started = true
  if not epoch then ctx.srd:write_file("epoch", tostring(s:epoch()) .. "\n") end
  -- non-elastic data parallel: a round waits for every learner (one that is lost stops
  -- the others, and run rolls everyone back to their last common checkpoint: rollback)
  if not ctx.rt.elastic and r.sync.preset == "dp" then s:set_quorum(r.islands.count) end
  ctx.syncer = s
  ctx.merges_saved = ctx.gm
  ctx.last_save = diloco.clock()
  -- the links: the recipe's (islands latency, bandwidth), a chaos link change under way,
  -- a cut under way (a syncer restarted by chaos takes them over)
  for m = 1, r.islands.count do
    local rate, latency = M.link_of(ctx, m)
    if rate > 0 or latency > 0 then s:shape(m, rate, latency) end
    local untl = ctx.cuts and ctx.cuts[m]
    if untl and untl - (diloco.clock() - ctx.t_start) > 0 then s:cut(m, untl - (diloco.clock() - ctx.t_start)) end
  end
  return s
end

-- Learner m's link now, as the syncer shapes it (bytes/s, 0: no cap; s): the island's
-- from the recipe with runtime.emulate_links (else, or nothing given: unshaped), each
-- field replaced by the chaos link events under way, the latest begun last.
function M.link_of(ctx, m)
  local links = ctx.recipe.runtime.emulate_links and ctx.recipe.islands.links
  local base = links and links[m] or {}
  local bw, lat = base.bandwidth, base.latency
  for _, e in ipairs(ctx.link_events and ctx.link_events[m] or {}) do
    bw, lat = e.bandwidth or bw, e.latency or lat
  end
  return (bw and bw < math.huge) and bw or 0, lat or 0
end

-- The syncer's global model into the file at path, as of `merges` merges.
local function write_global(ctx, path, merges)
  ctx.syncer:global(ctx.params)
  return isl_host.save_model(path, ctx.plist, ctx.recipe, merges, ctx.recipe_json)
end


-- The syncer started again from a checkpoint (meta: its metadata, nil: none): its versions
-- are the checkpoint's, and every learner it resyncs when it joins is checked against what
-- it reported (moved_back).
local function versions_restart(ctx, meta)
  ctx.versions = past.checkpoint_versions(meta, #ctx.plan)
  ctx.resync_check = {}
  for m = 1, ctx.recipe.islands.count do ctx.resync_check[m] = true end
end

-- Learner m joined a syncer started again from a checkpoint (every join resyncs it whole,
-- rt.h): a `resync` event for each fragment whose version it is moved back from, lower than
-- it reported.  Versions only grow within an epoch; a syncer resumed from a checkpoint older
-- than its last merges numbers them again from the checkpoint's (docs/runtime.md).
local function moved_back(ctx, m)
  if not (ctx.resync_check and ctx.resync_check[m]) then return end
  ctx.resync_check[m] = nil
  local r = ctx.reported[m] or {}
  for p = 1, #ctx.plan do
    local from, to = r[p], ctx.versions[p]
    if from and from > to then
      write(ctx, "resync", { learner = m, fragment = p, from_version = from, to_version = to,
        epoch = ctx.syncer:epoch(), wall_s = diloco.clock() - ctx.t_start })
    end
  end
  ctx.reported[m] = {} -- the old numbering is gone for it
end

-- Checkpoints the syncer in OUT/syncer (its state, and the global model beside it).
local function save_syncer(ctx)
  local total = ctx.gm
  -- with what a --resume needs to account for the whole run, not its own part: when the
  -- run started (Unix time) and its training window began, the useful tokens so far
  local meta = { ["diloco.run_id"] = ctx.run_id, ["diloco.merges"] = tostring(total),
    ["diloco.recipe_json"] = ctx.recipe_json, ["diloco.useful_tokens"] = string.format("%.17g", ctx.account:useful_tokens()),
    ["diloco.run_start"] = string.format("%.6f", ctx.run_start), ["diloco.train_start"] =
    string.format("%.6f", ctx.t_train_start or 0) }
  -- what this process had counted at this checkpoint, for a restart from it (restore_counts)
  ctx.saved_counts = ctx.saved_counts or {}
  ctx.saved_counts[total] = { merges = ctx.merges, times = ctx.account:merges() }
  local res, err = ctx.srd:save(total, function(path) return ctx.syncer:save(path, meta) end, function(path)
    return write_global(ctx, path, total)
  end)
  ctx.last_save, ctx.merges_saved = diloco.clock(), total
  local wall = diloco.clock() - ctx.t_start
  if res then
    ctx.metrics:write("checkpoint", { path = res.path, merges = total, epoch = ctx.syncer:epoch(), wall_s = wall })
  else
    ctx.metrics:write("checkpoint", { error = plain(err), merges = total, wall_s = wall })
  end
end

-- The syncer comes back in this process from checkpoint `last` (nil: none, a fresh one):
-- the merges made after it are lost (merges_lost), and with them their useful tokens and
-- their times (uptime).
local function restore_counts(ctx, last)
  local keep = last and math.tointeger(last.step) or 0
  local c = (ctx.saved_counts or {})[keep] or { merges = 0, times = 0 }
  ctx.merges_lost = (ctx.merges_lost or 0) + math.max(0, ctx.gm - keep)
  ctx.gm, ctx.merges = keep, c.merges
  ctx.account:forget_merges(c.times)
  local meta = last and diloco.safetensors_meta(last.path)
  versions_restart(ctx, meta)
  -- (no checkpoint: nothing merged stands; one of an older build's: the count goes on)
  ctx.account:set_useful_tokens(type(meta) == "table" and tonumber(meta["diloco.useful_tokens"] or "")
    or (last and ctx.account:useful_tokens() or 0))
end

local function maybe_save_syncer(ctx)
  if not ctx.syncer or (type(ctx.syncer) == "table" and ctx.syncer:any_down()) then return end -- (a set is whole)
  local r, total = ctx.recipe, ctx.gm
  local by_merges = ctx.rt.syncer_every > 0 and total - ctx.merges_saved >= ctx.rt.syncer_every
  local by_time = (r.checkpoint.minutes or 0) > 0 and diloco.clock() - ctx.last_save >= r.checkpoint.minutes * 60
  if (by_merges or by_time) and total > ctx.merges_saved then save_syncer(ctx) end
end


-- Sets up OUT, the global model and the syncer.  opts: out, listen, metrics, overwrite,
-- quiet, command, run_id, secret_file, address_file, advertise, net.
local function prepare(r, opts)
  local ctx = { recipe = r, opts = opts, t_start = diloco.clock(), faults = 0, rejects = 0, restarts = 0, merges = 0,
    learners = {}, evals = 0 }
  -- the syncer's own compute (evaluations) at one thread: its learners share the cores
  -- (an idle OpenMP team spins, taking a core from them)
  runhost.begin(r, r.threads or 1)
  local Mn = r.islands.count
  ctx.out = opts.out or r.out or ("runs/" .. (r.name or "run"))
  -- OUT/syncer holds the syncer's checkpoints: --resume continues from its newest (OUT's
  -- metrics are appended to), else a new run, refused over an old one without --overwrite
  ctx.rd = diloco.rundir.open(ctx.out, { overwrite = opts.overwrite, metrics = opts.metrics, command = opts.command,
    resume_hint = opts.supervise and "--resume latest" or "--resume",
    keep = r.checkpoint.keep, append = opts.resume and true or nil })
  if ctx.rd.took_over and not opts.quiet then
    io.stderr:write(string.format("diloco-lua: took over %s: it held only the start of a run that never saved "
      .. "anything (%s: killed or failed while it started)\n", ctx.out, table.concat(ctx.rd.took_over, ", ")))
  end
  local sok, srd = pcall(diloco.rundir.open, ctx.out .. "/syncer", { resume = opts.resume and "latest" or nil,
    overwrite = not opts.resume, command = opts.command, keep = r.checkpoint.keep })
  if not sok then
    ctx.rd:close()
    error(srd, 0)
  end
  ctx.srd = srd
  local ok, err = pcall(function()
    ctx.model = isl_host.build_model(r.model, r.seed)
    ctx.plist = ctx.model:parameters()
    ctx.params = diloco.Params(ctx.plist)
    ctx.n_params = ctx.params:numel()
    ctx.plan = islands.plan(r, ctx.params, #ctx.plist)
    local okd, loaders = pcall(diloco.data.open, r.data, 1, Mn, r.seed)
    if not okd then fail("data: %s", plain(loaders)) end
    ctx.loaders = loaders -- for the evaluation of the global model
    local fits, problems = diloco.recipe.check_data(r, loaders)
    if not fits then fail_code(2, "%s", table.concat(problems, "; ")) end
    local saved = {}
    if ctx.srd.resume_path then -- the run continued: its id, its merges so far
      local meta, err = diloco.safetensors_meta(ctx.srd.resume_path)
      if type(meta) ~= "table" then fail("--resume %s: %s", ctx.srd.resume_path, tostring(err)) end
      saved = meta
    end
    ctx.gm = math.tointeger(tonumber(saved["diloco.merges"] or "0")) or 0 -- the run's merges (continued on resume)
    ctx.merges = ctx.gm
    ctx.run_start = diloco.wall_time() - (diloco.clock() - ctx.t_start)
    if ctx.srd.resume_path then
      -- a resumed syncer accounts for the whole run: its clock counts from the run's start,
      -- the useful tokens and the merge times are those of the merges that stand (the
      -- checkpoint's; those made after it by the syncer that died are lost: merges_lost)
      local times, reached, first, lost_before = past.past_merges(ctx.rd.metrics_path, ctx.gm,
        tonumber(saved["diloco.run_start"] or ""))
      local start = tonumber(saved["diloco.run_start"] or "") or first
      if start and start <= ctx.run_start then
        ctx.t_start = ctx.t_start - (ctx.run_start - start)
        ctx.run_start = start
        ctx.resumed_merge_times = times
      end
      ctx.resumed_useful = tonumber(saved["diloco.useful_tokens"] or "")
      ctx.resumed_train_start = tonumber(saved["diloco.train_start"] or "")
      ctx.merges_lost = math.max(0, reached - ctx.gm) -- (this resume's; the run's in the summary)
      ctx.merges_lost_before = lost_before
      ctx.reported = past.past_reported(ctx.rd.metrics_path)
      versions_restart(ctx, saved)
      -- the run's counters over every syncer before this one, and this start a restart
      local counts = past.past_counts(ctx.rd.metrics_path)
      ctx.rejects, ctx.faults, ctx.syncer_restarts = counts.rejects, counts.faults, counts.syncer_restarts + 1
    else
      ctx.reported, ctx.versions = {}, past.checkpoint_versions(nil, #ctx.plan)
    end
    if opts.secret_file then
      ctx.secret_file = opts.secret_file
    elseif ctx.srd.resume_path and not opts.secret and diloco.file_id(ctx.out .. "/secret") then
      ctx.secret_file = ctx.out .. "/secret" -- the run's: its learners hold it
    elseif not opts.secret then
      ctx.secret_file = ctx.out .. "/secret" -- a fresh one per run, readable by its owner only
      os.remove(ctx.secret_file)
      local wok, werr = diloco.proc.write_private(ctx.secret_file, random_hex(32) .. "\n")
      if not wok then fail("writing the run's secret: %s", werr) end
    end
    ctx.run_id = saved["diloco.run_id"] or opts.run_id or string.format("%s-%s", r.name or "run", random_hex(4))
    ctx.rt = M.runtime(r)
    ctx.lopts, ctx.sopts, ctx.run_json = islands.sync_options(r, ctx.plist, ctx.rt.heartbeat, 0)
    M.start_syncer(ctx, opts.listen or "127.0.0.1:0", ctx.srd.resume_path)
    ctx.port = ctx.syncer:port()
    -- the address learners reach it at (the address file's): --advertise, its port the
    -- bound one unless it names one; else the listen address, a wildcard host being the
    -- interface that routes off this host (rt.h dlc_rt_advertise)
    local aok, address = pcall(require("diloco.shards").addresses, opts.listen or "127.0.0.1:0",
      type(ctx.syncer) == "table" and ctx.syncer:ports() or { ctx.port }, opts.advertise,
      type(ctx.syncer) == "table" and ctx.syncer:standby_ports() or nil)
    if not aok then fail_code(2, "%s", plain(address)) end
    ctx.address = address
    local metrics, merr = diloco.metrics.open(ctx.rd.metrics_path, { append = ctx.rd.append })
    if not metrics then fail("%s", merr) end
    ctx.metrics = metrics
    runhost.recipe_files(ctx, true) -- (before a global model is written again below: its metadata)
    if ctx.srd.resume_path then
      local behind = ctx.srd.model_behind
      if behind then -- a save cut short between its two files: the model of its checkpoint again
        local wok, werr = write_global(ctx, ctx.srd.out .. "/model.safetensors", behind.step)
        if not wok then fail("--resume %s: writing its global model: %s", behind.path, plain(werr)) end
      end
      ctx.metrics:write("resume", { from = ctx.srd.resume_path, merges = ctx.gm, epoch = ctx.syncer:epoch(),
        merges_lost = ctx.merges_lost, wall_s = diloco.clock() - ctx.t_start,
        model_behind = behind and behind.model_step or nil, skipped = ctx.srd.skipped })
      -- on stderr whatever --quiet says: losing work is never silent
      local notes = {}
      if behind then
        notes[#notes + 1] = string.format("; its save was cut short before model.safetensors (of %d merges), "
          .. "written again", behind.model_step)
      end
      for _, k in ipairs(ctx.srd.skipped or {}) do
        notes[#notes + 1] = string.format("; %s skipped, kept: %s", k.name, k.why)
      end
      io.stderr:write(string.format("diloco-lua: syncer resumed from %s (%d merges): %s%s\n", ctx.srd.resume_path,
        ctx.gm, ctx.merges_lost > 0 and string.format("%d merge%s made after it lost", ctx.merges_lost,
          ctx.merges_lost == 1 and "" or "s") or "no merges lost", table.concat(notes)))
      io.stderr:flush()
    end
    if opts.recipe_path and not ctx.srd.resume_path then
      -- the merge tape's header: what `sim --replay OUT` loads the recipe from (docs/runtime.md)
      local abs = diloco.proc.realpath(opts.recipe_path) or opts.recipe_path
      local tok, terr = ctx.rd:write_file("tape.json", diloco.json_encode({ format = 1, recipe = abs,
        set = opts.set or {}, learners = Mn, run_id = ctx.run_id }, { sort_keys = true, indent = 2 }) .. "\n")
      if not tok then fail("writing the merge tape's header: %s", terr) end
    end
    if opts.address_file then -- for learners on a shared file system: written whole, then renamed
      local tmp = opts.address_file .. ".tmp"
      local fh = io.open(tmp, "w")
      if not fh then fail("--address-file %s: cannot write it", opts.address_file) end
      fh:write(ctx.address, "\nrun ", ctx.run_id, "\n")
      fh:close()
      local rok, rerr = os.rename(tmp, opts.address_file)
      if not rok then fail("--address-file %s: %s", opts.address_file, rerr) end
    end
  end)
  if not ok then
    if ctx.syncer then ctx.syncer:close() end
    if ctx.metrics then ctx.metrics:close() end
    ctx.srd:close()
    ctx.rd:close()
    error(err, 0)
  end
  for m = 1, Mn do ctx.learners[m] = { id = m, state = "starting", crashes = 0 } end
  -- the account (core/account.h): the islands' states as the supervisor sees them, the
  -- merges; over the training window, from now (a resumed syncer: the run's start of it)
  ctx.account = diloco.Account(Mn, ctx.resumed_train_start or elapsed(ctx))
  for _, t in ipairs(ctx.resumed_merge_times or {}) do ctx.account:merge(t, 0) end
  ctx.account:set_useful_tokens(ctx.resumed_useful or 0)
  ctx.log_every = r.log.every or math.max(1, r.steps // 20)
  ctx.quiet = opts.quiet
  return ctx
end




-- The global model into ctx.params: the syncer's Θ; in data parallel (no Θ at the syncer,
-- every learner holds the same model) the newest model a learner saved in OUT/learner-N.
local function load_global(ctx)
  if ctx.recipe.sync.preset ~= "dp" then
    ctx.syncer:global(ctx.params)
    return true
  end
  -- a learner that restarted in elastic dp replayed the steps it missed and holds the
  -- others' model, unless the syncer no longer held some of them (docs/runtime.md), so
  -- one that never restarted is preferred; a learner killed before its end left no
  -- model.safetensors, but its newest checkpoint holds the model of that step (the one
  -- a non-elastic rollback restarts from)
  local best, best_step, best_clean
  local function consider(m, path, step_of)
    local t, meta = diloco.load_safetensors(path)
    local step = t and step_of(meta)
    local clean = not ctx.learners[m].restarted_at
    if step and (not best or (clean and not best_clean) or (clean == best_clean and step > best_step)) then
      best, best_step, best_clean = t, step, clean
    end
  end
  for m = 1, ctx.recipe.islands.count do
    local dir = string.format("%s/learner-%d", ctx.out, m)
    consider(m, dir .. "/model.safetensors",
      function(meta) return math.tointeger(tonumber(meta["diloco.step"] or "")) end)
    local list = diloco.rundir.checkpoints(dir)
    local last = list[#list]
    if last then consider(m, last.path, function() return last.step end) end
  end
  if not best then
    -- nobody saved a model or a checkpoint (stopped before the first): the job's model
    -- is the initial one, which a dp syncer holds (it merges nothing)
    ctx.syncer:global(ctx.params)
    return true
  end
  for _, p in ipairs(ctx.plist) do
    local src = best[p[1]]
    if not src then fail("dp: a learner's model lacks tensor %s", p[1]) end
    p[2]:copy(src)
  end
  return true
end

-- The global model on the held-out subset; final: at the end (train.final_eval: the
-- whole split too, into ev).
local function evaluate_global(ctx, final, ev)
  load_global(ctx)
  local loaders = ctx.loaders
  if final then return isl_host.final_eval(ctx.model, loaders, ctx.recipe, ev) end
  return isl_host.evaluate(ctx.model, loaders, ctx.recipe.eval.batches)
end


local function maybe_eval(ctx)
  local r = ctx.recipe
  -- dp: at the end only; a shard holds part of the global model: never
  if r.eval.every <= 0 or not ctx.syncer or r.sync.preset == "dp" or (ctx.opts.shards or 1) > 1 or
      (type(ctx.syncer) == "table" and ctx.syncer:any_down()) then return end
  local step = run_step(ctx)
  local due = (ctx.evals + 1) * r.eval.every
  if step < due or due >= r.steps then return end
  ctx.evals = step // r.eval.every
  local e = evaluate_global(ctx, false)
  e.step = step
  ctx.last_eval = e
  runhost.eval_line(ctx, e, { step = step, tokens = tokens_so_far(ctx) })
  say(ctx, "eval at step %d: global loss %.4f", step, e.loss)
end



local function requorum(ctx)
  if ctx.syncer and type(ctx.recipe.sync.quorum) == "function" then
    ctx.syncer:set_quorum(islands.quorum_value(ctx.recipe, ctx.syncer:stats().live, elapsed(ctx)))
  end
end

-- One event of the syncer driver.
local function on_syncer_event(ctx, ev)
  local L = ev.learner and ctx.learners[ev.learner]
  if ev.type == "merged" then
    local info = islands.merge_info(ev.merge)
    info.wall_s, info.shard = elapsed(ctx), ev.shard -- (islands.syncers > 1: which shard merged)
    ctx.merges = ctx.merges + 1
    ctx.gm = ctx.gm + 1
    if ctx.job_rollbacks then -- non-elastic dp: what a rollback past this step takes back
      ctx.dp_useful[info.version] = (ctx.dp_useful[info.version] or 0) + (ev.merge.useful_tokens or 0)
      ctx.dp_step = math.max(ctx.dp_step or 0, info.version)
    end
    ctx.account:merge(info.wall_s, ev.merge.useful_tokens or 0)
    ctx.versions[info.fragment] = info.version
    for _, c in ipairs(info.contributors) do
      local r = ctx.reported[c.learner] or {}
      ctx.reported[c.learner] = r
      r[info.fragment] = math.max(r[info.fragment] or -1, c.base_version)
    end
    write(ctx, "merge", info)
    if ctx.recipe.hooks.on_merge then hook("on_merge", ctx.recipe.hooks.on_merge, info) end
    for _, c in ipairs(info.contributors) do
      local l = ctx.learners[c.learner]
      if l and l.cut_ended and not l.cut_recovered then -- its first contribution merged since its cut ended
        l.cut_recovered = true
        fault(ctx, { kind = "recovered", learner = c.learner, latency = info.wall_s - l.cut_ended, cause = "cut" })
      end
      if l and l.restarted_at and not l.recovered then -- its first contribution merged since it restarted
        l.recovered = true
        fault(ctx, { kind = "recovered", learner = c.learner, latency = info.wall_s - l.restarted_at,
          cause = l.down_cause })
      end
    end
  elseif ev.type == "joined" then
    if L then
      moved_back(ctx, ev.learner)
      L.joined = true
      if not ctx.supervising then island(ctx, ev.learner, "up") end -- (run: its process is, from its start)
      L.from = ev.text and ev.text:match("connected from (%S+)") or L.from
      if L.restarted_at and not L.rejoined then
        L.rejoined = true
        fault(ctx, { kind = "joined", learner = ev.learner, latency = elapsed(ctx) - L.restarted_at, text = ev.text })
      elseif L.lost then
        -- after a cut: its latency from the cut's end (the syncer's driver ends it on its
        -- own clock, maybe a moment before this loop sees the time)
        local cut_end = L.cut_ended or (ctx.cuts and ctx.cuts[ev.learner])
        fault(ctx, { kind = "joined", learner = ev.learner, text = ev.text,
          latency = cut_end and math.max(0, elapsed(ctx) - cut_end) or nil, cause = cut_end and "cut" or nil })
      end
      L.lost = false
      if ctx.supervising then sup.joined(ctx, ev.learner) end -- (holds in a non-elastic run)
    end
    requorum(ctx)
  elseif ev.type == "lost" then
    if L then L.lost = true end
    if L and not ctx.supervising then island(ctx, ev.learner, "down") end
    fault(ctx, { kind = "lost", learner = ev.learner, text = ev.text, detected_s = ev.clock - ctx.t_start })
    -- holds; a non-elastic dp job hung (paused) or cut off goes back as a whole
    if L and ctx.supervising then sup.lost(ctx, ev.learner) end
    requorum(ctx)
  elseif ev.type == "rejected" then
    write(ctx, "reject", { learner = ev.learner, fragment = ev.fragment, reason = ev.reason, wall_s = elapsed(ctx) })
    ctx.rejects = ctx.rejects + 1
  elseif ev.type == "refused" then -- the first of its reason in runtime.refusals
    fault(ctx, { kind = "refused", learner = ev.learner, text = ev.text })
    say(ctx, "syncer: refused %s", ev.text or "")
  elseif ev.type == "refusals" then -- the interval's count, by reason and address
    write(ctx, "refusals", { count = ev.count, interval_s = ev.interval, text = ev.text, wall_s = elapsed(ctx) })
    say(ctx, "syncer: %s", ev.text or "")
  elseif ev.type == "behind" then -- merged fragments to it waited behind its full queue
    write(ctx, "behind", { learner = ev.learner, fragment = ev.fragment, count = ev.count, interval_s = ev.interval,
      text = ev.text, wall_s = elapsed(ctx) })
    say(ctx, "syncer: learner %d: %s", ev.learner or 0, ev.text or "")
  elseif ev.type == "standby" then -- replication (docs/shards.md, "Standbys"): attached, lost, took over
    fault(ctx, { kind = "standby", text = ev.text, epoch = ev.epoch, shard = ev.shard })
    say(ctx, "syncer: %s", ev.text or "")
    if ev.epoch and ctx.opts.standby_of then ctx.took_over = elapsed(ctx) end
    if ev.epoch and type(ctx.syncer) == "table" then require("diloco.shard_faults").took_over(ctx, ev) end
  elseif ev.type == "replaced" then -- a silent connection gave way to a new claim on its id
    fault(ctx, { kind = "replaced", learner = ev.learner, text = ev.text })
    say(ctx, "syncer: learner %d: %s", ev.learner, ev.text or "")
  elseif ev.type == "bye" then
    if L then
      L.bye = true
      if not ctx.supervising then
        L.state = "done"
        island(ctx, ev.learner, "done")
      end
    end
  end
end
-- (ctest/fuzz_syncer.c feeds it every event of a syncer driven by fuzzed peers, as here)
M.on_syncer_event = on_syncer_event

local function pump_syncer(ctx, timeout)
  if not ctx.syncer then -- down (chaos): nothing to hear until it is back
    diloco.proc.sleep(timeout)
    return
  end
  local ev, err = ctx.syncer:poll(timeout)
  if ev == nil and err then fail("%s", err) end
  while ev do
    on_syncer_event(ctx, ev)
    ev = ctx.syncer:poll(0)
  end
end

local stop_reason = isl_host.stop_reason
local finish = require("diloco.runend").finish

-- Everything is over when every learner has left: its process is gone for good (run), or
-- (serve) it said BYE (before a --resume too: the syncer's checkpoint says so), or, with
-- no learner connected, it stayed away runtime.join_timeout (never joined, or lost and
-- not back): those are named (a fault event of kind absent) and the run ends without them.
-- Seconds a learner is away before the syncer says it waits for it (a quarter of a
-- shorter join_timeout).
local WAIT_SAY_AFTER = 5

local function all_done(ctx)
  if ctx.supervising then -- (the supervisor's rules: core/supervise.h)
    if not sup.all_ended(ctx) then return false end
    ctx.absent = {}
    return true
  end
  if ctx.opts.standby_of and ctx.syncer then -- a standby: waits while its primary serves, ends with it
    local sb = ctx.syncer:stats().standby
    if sb == 4 then
      ctx.absent = {}
      return true
    elseif sb == 2 then
      return false
    end
  end
  local away, waiting = {}, false
  ctx.wait_said = ctx.wait_said or {}
  for m in ipairs(ctx.learners) do
    if not ctx.syncer then return false end
    local i = ctx.syncer:learner(m)
    if not i.bye then
      if i.connected then -- training: the run goes on
        ctx.wait_said[m] = nil
        waiting = true
      elseif i.absent < ctx.rt.join_timeout then
        -- a wait says what it waits for, and until when (once per absence, after a few seconds)
        if i.absent >= math.min(WAIT_SAY_AFTER, ctx.rt.join_timeout / 4) and ctx.wait_said[m] ~= i.joins then
          ctx.wait_said[m] = i.joins
          say(ctx, "syncer: waiting for learner %d to %s, until %s (runtime.join_timeout = %g s)", m,
            i.joins > 0 and "come back" or "join", os.date("%H:%M:%S",
              math.floor(diloco.wall_time() + ctx.rt.join_timeout - i.absent)), ctx.rt.join_timeout)
        end
        waiting = true
      else
        away[#away + 1] = { m = m, info = i }
      end
    end
  end
  if waiting then return false end
  ctx.absent = {}
  for _, a in ipairs(away) do
    local text = a.info.joins > 0
      and string.format("learner %d did not come back within runtime.join_timeout = %g s (away %.1f s, no learner "
        .. "connected): the run ends without it", a.m, ctx.rt.join_timeout, a.info.absent)
      or string.format("learner %d did not join this syncer within runtime.join_timeout = %g s (no learner "
        .. "connected): the run ends without it", a.m, ctx.rt.join_timeout)
    ctx.absent[#ctx.absent + 1] = a.m
    fault(ctx, { kind = "absent", learner = a.m, absent_s = a.info.absent, joins = a.info.joins, text = text })
    say(ctx, "%s", text)
  end
  return true
end

local function loop(ctx)
  local r = ctx.recipe
  while true do
    local slowing = false
    for _, L in ipairs(ctx.learners) do slowing = slowing or (L.slow_factor or 1) ~= 1 end
    pump_syncer(ctx, slowing and 0.01 or 0.05)
    if ctx.supervising then sup.turn(ctx) end
    maybe_eval(ctx)
    maybe_save_syncer(ctx)
    if ctx.supervising and ctx.quiet then -- the display reads the learners' metrics otherwise
      for m = 1, #ctx.learners do learner_progress(ctx, m) end
    end
    display(ctx)
    if all_done(ctx) then break end
    if stop_reason(ctx) and not ctx.stopping then
      ctx.stopping = elapsed(ctx)
      say(ctx, "stopping (%s): each learner finishes its step and leaves", ctx.signal)
      if not ctx.supervising then break end
      sup.stop(ctx) -- TERM to each (KILL after sup.STOP_TIMEOUT); one down stays down
    end
  end
  ctx.t_train_end = elapsed(ctx)
  if ctx.supervising then -- what the learners wrote last (their faults)
    for m = 1, #ctx.learners do learner_progress(ctx, m) end
  end
  if r.hooks then end
end

-- Serves the recipe's syncer; with opts.supervise, also starts and supervises its
-- learners.  Returns summary, interrupted, signo; a failure writes the summary, then
-- raises the one error type with code 1.
function M.serve(r, opts)
  local ctx = prepare(r, opts)
  -- what the supervisor (rollbacks, chaos) and the end (lua/diloco/runend.lua) ask of the syncer
  ctx.host = { start_syncer = M.start_syncer, save_syncer = save_syncer, restore_counts = restore_counts,
    next_epoch = next_epoch,
    link_of = M.link_of, pump_syncer = pump_syncer, evaluate_global = evaluate_global, load_global = load_global }
  ctx.supervising = opts.supervise
  if ctx.supervising and not ctx.rt.elastic and r.sync.preset == "dp" then
    ctx.job_rollbacks, ctx.dp_useful, ctx.rolled_back_steps, ctx.rolled_back_tokens = 0, {}, 0, 0
  end
  local ok, err = pcall(function()
    ctx.tokens_per_batch = ctx.loaders.tokens_per_batch
    say(ctx, "%s: %d islands (%s), %s parameters; syncer at %s (run %s)", r.name or "run", r.islands.count,
      r.sync.preset, diloco.progress.human(ctx.n_params), ctx.address, ctx.run_id)
    if ctx.supervising then
      ctx.chaos = sup.chaos_schedule(ctx)
      for m = 1, r.islands.count do
        if r.islands.list[m].ranks and not ctx.mpirun then ctx.mpirun = sup.find_mpirun(m, r.islands.list[m].ranks) end
      end
      sup.start(ctx) -- each learner's process
    end
    ctx.t_train_start = ctx.account:t0() -- (a resumed syncer: the run's)
    ctx.chaos_t0 = elapsed(ctx)
    -- a checkpoint of the start (merges 0), so that a syncer killed before its first
    -- periodic one is resumed too (it loses the merges so far, as after any other)
    if not ctx.srd.resume_path then save_syncer(ctx) end
    loop(ctx)
  end)
  if not ok and ctx.supervising then -- never leave children behind
    for m, L in ipairs(ctx.learners) do
      if L.pid then
        pcall(signal_learner, ctx, m, "KILL")
        pcall(diloco.proc.wait, L.pid, true)
      end
    end
  end
  local summary, ferr = finish(ctx, not ok and require("diloco.train").loop_error(err) or nil)
  if ctx.mpi_tmp then -- the islands' OpenMPI session directories (supervisor.lua), empty once their jobs ended
    for m = 1, r.islands.count do os.remove(string.format("%s/%d", ctx.mpi_tmp, m)) end
    os.remove(ctx.mpi_tmp)
  end
  if ferr then error({ diloco_error = tostring(ferr), code = 1, summary = summary }, 0) end
  return summary, ctx.signal ~= nil, ctx.signo
end

function M.run(r, opts)
  opts.supervise = true
  return M.serve(r, opts)
end

return M

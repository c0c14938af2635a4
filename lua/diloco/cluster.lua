-- diloco.cluster: the syncer of a real run, and the supervisor of its learner processes.
--
--   diloco-lua run RECIPE      (islands.count > 1)  M.run: the syncer in this process,
--                              M learner processes (diloco-lua learner, exec'd), chaos
--   diloco-lua syncer RECIPE --listen HOST:PORT     M.serve: the syncer alone, learners
--                              started by any launcher
--
-- OUT holds what `sim` writes (metrics.jsonl with merge, fault, eval and summary events
-- in sim's schema, recipe.json, model.safetensors: the global model), plus learner-N/
-- (each learner's own metrics, checkpoints and log) and secret (the run's secret, mode
-- 0600, handed to the learners by file).  docs/runtime.md.
local diloco = require "diloco"
local train = require "diloco.train"
local islands = require "diloco.islands"
local hook = islands.hook
local M = {}

local fail, fail_code, plain = train.fail, train.fail_code, train.plain

-- Limits of the supervisor: every wait has a deadline (the recipe's runtime section
-- sets the join deadline, the drain and the restart budget).
M.STOP_TIMEOUT = 60       -- s: learners asked to stop must be gone within this, else KILL
M.SLOW_PERIOD = 0.5       -- s: a chaos slow event runs its learner 1/factor of each period
M.RESTART_MIN = 1         -- s: the first restart of a crashed learner waits this,
M.RESTART_MAX = 30        -- s:   doubled per crash in a row, up to this

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

local function write(ctx, event, fields)
  local ok, err = ctx.metrics:write(event, fields)
  if not ok then fail("%s", err) end
end

local function median(xs)
  if #xs == 0 then return nil end
  local c = table.move(xs, 1, #xs, 1, {})
  table.sort(c)
  local n = #c
  return n % 2 == 1 and c[(n + 1) // 2] or 0.5 * (c[n // 2] + c[n // 2 + 1])
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
  local s, serr = diloco.Syncer { params = ctx.params, plan = ctx.plan, learners = r.islands.count,
    learner = ctx.lopts, syncer = ctx.sopts, listen = listen, run = ctx.run_id, resume = resume, epoch = epoch,
    -- the run's first syncer lets its learners start together (rt.h, the start gate); a
    -- later one (a restart, a rollback, the end) serves a run under way
    start_learners = not ctx.syncer_started and ctx.rt.start_timeout > 0 and r.islands.count or 0,
    start_timeout = ctx.rt.start_timeout, refusals_every = ctx.rt.refusals,
    net = { secret_file = ctx.secret_file, secret = ctx.opts.secret, timeout = ctx.rt.timeout,
      heartbeat = ctx.rt.heartbeat, tls = ctx.opts.tls,
      -- every learner of a run on one host comes from one address, all at once
      max_unauth_per_addr = math.max(8, r.islands.count) } }
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

-- What OUT/metrics.jsonl says of the run's merges before a --resume: the seconds from
-- the run's start (Unix time `start`; nil: from the file's first event) of the merges
-- 1..`upto` as they stand (each earlier resume continued from its checkpoint's count,
-- the merges after that checkpoint were lost), the count the last syncer had reached,
-- the Unix time of the file's first event, and the merges lost at the earlier resumes.
-- Read by pattern: a merge line is long.
function M.past_merges(path, upto, start)
  local f = path and io.open(path, "r")
  if not f then return {}, upto, nil, 0 end
  local at, gm, first, lost = {}, 0, nil, 0
  for line in f:lines() do
    local t = tonumber(line:match('^{"event":"[%w_]+","time":([%d.]+)') or "")
    first = first or t
    if line:find('^{"event":"merge"') then
      gm = gm + 1
      at[gm] = t
    elseif line:find('^{"event":"resume"') then
      local from = math.tointeger(tonumber(line:match('"merges":(%d+)') or "")) or gm
      lost, gm = lost + math.max(0, gm - from), from
    end
  end
  f:close()
  start = start or first
  local times = {}
  for k = 1, math.min(upto, gm) do
    if at[k] and start then times[#times + 1] = at[k] - start end
  end
  return times, gm, first, lost
end

-- The syncer's global model into the file at path, as of `merges` merges.
local function write_global(ctx, path, merges)
  ctx.syncer:global(ctx.params)
  return diloco.save_safetensors(path, ctx.plist, { ["diloco.recipe_json"] = ctx.recipe_json,
    ["diloco.step"] = tostring(merges) })
end

-- Whether a fault event (its fields) counts in the summary's `faults`: each fault seen
-- once, at its begin (a fault's end, begin = false, and a recovery, kind joined or
-- recovered, do not count; those without begin, lost or crash, do).
function M.counts_as_fault(e)
  return e.begin ~= false and e.kind ~= "joined" and e.kind ~= "recovered"
end

-- What OUT/metrics.jsonl at path counts before a --resume, for the run's summary: its
-- reject events, its fault events that count (M.counts_as_fault) and its syncer restarts
-- (resume events, and chaos syncer faults' ends).
function M.past_counts(path)
  local c = { rejects = 0, faults = 0, syncer_restarts = 0 }
  local f = path and io.open(path, "r")
  if not f then return c end
  for line in f:lines() do
    if line:find('^{"event":"reject"') then
      c.rejects = c.rejects + 1
    elseif line:find('^{"event":"resume"') then
      c.syncer_restarts = c.syncer_restarts + 1
    elseif line:find('^{"event":"fault"') then
      local e = diloco.json_decode(line)
      if type(e) == "table" then
        if M.counts_as_fault(e) then c.faults = c.faults + 1 end
        if e.kind == "syncer" and e.begin == false then c.syncer_restarts = c.syncer_restarts + 1 end
      end
    end
  end
  f:close()
  return c
end

-- The fragments' versions a syncer checkpoint holds (its metadata syncer.versions, one per
-- fragment), 1-based by fragment; nil: no checkpoint (a fresh syncer: every version 0).
local function checkpoint_versions(meta, P)
  local v = {}
  local list = type(meta) == "table" and meta["syncer.versions"]
  if list then
    for x in list:gmatch("[^,]+") do v[#v + 1] = math.tointeger(tonumber(x)) end
  end
  for p = 1, P do v[p] = v[p] or 0 end
  return v
end

-- What each learner reported to the syncer incarnations since the last resume in the metrics
-- at path: reported[m][p], the highest base version of its merged contributions of fragment
-- p (the versions a resumed syncer may move it back from, merge by merge as on_syncer_event
-- keeps them).
local function past_reported(path)
  local f = path and io.open(path, "r")
  local reported = {}
  if not f then return reported end
  for line in f:lines() do
    if line:find('^{"event":"resume"') then
      reported = {}
    elseif line:find('^{"event":"merge"') then
      local e = diloco.json_decode(line)
      if type(e) == "table" and type(e.contributors) == "table" then
        for _, c in ipairs(e.contributors) do
          local r = reported[c.learner] or {}
          reported[c.learner] = r
          if c.base_version and e.fragment then r[e.fragment] = math.max(r[e.fragment] or -1, c.base_version) end
        end
      end
    end
  end
  f:close()
  return reported
end

-- The syncer started again from a checkpoint (meta: its metadata, nil: none): its versions
-- are the checkpoint's, and every learner it resyncs when it joins is checked against what
-- it reported (moved_back).
local function versions_restart(ctx, meta)
  ctx.versions = checkpoint_versions(meta, #ctx.plan)
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
  if not ctx.syncer then return end
  local r, total = ctx.recipe, ctx.gm
  local by_merges = ctx.rt.syncer_every > 0 and total - ctx.merges_saved >= ctx.rt.syncer_every
  local by_time = (r.checkpoint.minutes or 0) > 0 and diloco.clock() - ctx.last_save >= r.checkpoint.minutes * 60
  if (by_merges or by_time) and total > ctx.merges_saved then save_syncer(ctx) end
end

local function elapsed(ctx) return diloco.clock() - ctx.t_start end

-- Learner m's island is in `state` from now on (core/account.h: off, starting, up, down,
-- paused, held, done).
local function island(ctx, m, state) ctx.account:enter(m, state, elapsed(ctx)) end

-- Sets up OUT, the global model and the syncer.  opts: out, listen, metrics, overwrite,
-- quiet, command, run_id, secret_file, address_file, advertise, net.
local function prepare(r, opts)
  local ctx = { recipe = r, opts = opts, t_start = diloco.clock(), faults = 0, rejects = 0, restarts = 0, merges = 0,
    learners = {}, evals = 0 }
  -- the syncer's own compute (evaluations) at one thread: its learners share the cores
  -- (an idle OpenMP team spins, taking a core from them)
  diloco.set_num_threads(r.threads or 1)
  diloco.catch_signals()
  diloco.seed(r.seed)
  local Mn = r.islands.count
  ctx.out = opts.out or r.out or ("runs/" .. (r.name or "run"))
  -- OUT/syncer holds the syncer's checkpoints: --resume continues from its newest (OUT's
  -- metrics are appended to), else a new run, refused over an old one without --overwrite
  ctx.rd = diloco.rundir.open(ctx.out, { overwrite = opts.overwrite, metrics = opts.metrics, command = opts.command,
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
    ctx.model = train.build_model(r.model, r.seed)
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
      local times, reached, first, lost_before = M.past_merges(ctx.rd.metrics_path, ctx.gm,
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
      ctx.reported = past_reported(ctx.rd.metrics_path)
      versions_restart(ctx, saved)
      -- the run's counters over every syncer before this one, and this start a restart
      local past = M.past_counts(ctx.rd.metrics_path)
      ctx.rejects, ctx.faults, ctx.syncer_restarts = past.rejects, past.faults, past.syncer_restarts + 1
    else
      ctx.reported, ctx.versions = {}, checkpoint_versions(nil, #ctx.plan)
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
    ctx.lopts, ctx.sopts = islands.sync_options(r, ctx.plist, ctx.rt.heartbeat, 0)
    M.start_syncer(ctx, opts.listen or "127.0.0.1:0", ctx.srd.resume_path)
    ctx.port = ctx.syncer:port()
    local host = (opts.listen or "127.0.0.1:0"):match("^(.*):%d+$") or "127.0.0.1"
    if host == "0.0.0.0" or host == "[::]" then host = "127.0.0.1" end
    ctx.address = opts.advertise or string.format("%s:%d", host, ctx.port)
    local metrics, merr = diloco.metrics.open(ctx.rd.metrics_path, { append = ctx.rd.append })
    if not metrics then fail("%s", merr) end
    ctx.metrics = metrics
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
    ctx.recipe_json = diloco.json_encode(train.effective_recipe(r), { sort_keys = true })
    local wok, werr = ctx.rd:write_file("recipe.json",
      diloco.json_encode(train.effective_recipe(r), { sort_keys = true, indent = 2 }) .. "\n")
    if not wok then fail("writing the effective recipe: %s", werr) end
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

local function say(ctx, fmt, ...)
  ctx.drawn = nil -- the live block is not redrawn over this line
  if not ctx.quiet then
    io.stderr:write(string.format(fmt, ...), "\n")
    io.stderr:flush()
  end
end


-- The run's step: the median of the learners' reported schedule steps.
local function run_step(ctx)
  local xs = {}
  for m = 1, ctx.recipe.islands.count do
    local i = ctx.syncer:learner(m)
    if i.joined then xs[#xs + 1] = i.steps end
  end
  return math.floor(median(xs) or 0)
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
  if final then return train.final_eval(ctx.model, loaders, ctx.recipe, ev) end
  return train.evaluate(ctx.model, loaders, ctx.recipe.eval.batches)
end

local tokens_so_far -- (below, with the learners' accounts)

local function maybe_eval(ctx)
  local r = ctx.recipe
  if r.eval.every <= 0 or not ctx.syncer or r.sync.preset == "dp" then return end -- dp: at the end only
  local step = run_step(ctx)
  local due = (ctx.evals + 1) * r.eval.every
  if step < due or due >= r.steps then return end
  ctx.evals = step // r.eval.every
  local e = evaluate_global(ctx, false)
  e.step = step
  ctx.last_eval = e
  write(ctx, "eval", { step = step, loss = e.loss, accuracy = e.accuracy, tokens = tokens_so_far(ctx),
    wall_s = elapsed(ctx) })
  if r.hooks.on_eval then hook("on_eval", r.hooks.on_eval, e) end
  say(ctx, "eval at step %d: global loss %.4f", step, e.loss)
end

local function fault(ctx, info)
  info.wall_s = elapsed(ctx)
  -- the time on the fault schedule's clock (the recipe's `at`; sim's virtual_s)
  if ctx.chaos_t0 then info.schedule_s = info.wall_s - ctx.chaos_t0 end
  write(ctx, "fault", info)
  if M.counts_as_fault(info) then ctx.faults = ctx.faults + 1 end
  if ctx.recipe.hooks.on_fault then hook("on_fault", ctx.recipe.hooks.on_fault, info) end
end

-- runtime.elastic = false (non-elastic data parallel, the baseline of the chaos
-- benchmark): while any learner is lost, every other one is stopped (SIGSTOP), and all
-- go on together once it is back.
-- An island of several ranks (islands[m].ranks > 1, docs/mpi.md) runs as one mpirun job:
-- L.pid is mpirun's.  mpirun puts each rank in a process group of its own and, killed
-- alone, leaves them running, so its ranks are signalled by pid (each checked to be a
-- child of that mpirun): STOP, CONT and KILL reach every rank (KILL then mpirun too);
-- TERM goes to rank 0, the learner, which stops its ranks and ends in order.
local function rank_pid(ctx, m, k)
  local f = io.open(string.format("%s/learner-%d/rank-%d.pid", ctx.out, m, k), "r")
  local pid = f and math.tointeger(tonumber(f:read("l") or ""))
  if f then f:close() end
  return pid
end

local function signal_learner(ctx, m, sig)
  local L = ctx.learners[m]
  if not L.pid then return nil end
  if not L.ranks then return diloco.proc.signal(L.pid, sig) end
  if sig == "TERM" then
    local pid = rank_pid(ctx, m, 0)
    if pid and diloco.proc.signal_grandchild(L.pid, pid, "TERM") then return true end
    return diloco.proc.signal(L.pid, "TERM") -- rank 0 not up yet: mpirun ends its job
  end
  for _, pid in ipairs(diloco.proc.children(L.pid)) do diloco.proc.signal_grandchild(L.pid, pid, sig) end
  if sig == "KILL" then return diloco.proc.signal(L.pid, "KILL") end
  return true
end

local function hold_others(ctx)
  if ctx.rt.elastic or not ctx.supervising or ctx.job_rollbacks then return end
  local anyone_lost = false
  for _, L in ipairs(ctx.learners) do
    anyone_lost = anyone_lost or (L.lost and L.state ~= "done") or L.state == "down"
  end
  for m, L in ipairs(ctx.learners) do
    local hold = anyone_lost and not L.lost and L.state == "running"
    if L.pid and hold ~= (L.held or false) then
      signal_learner(ctx, m, hold and "STOP" or "CONT")
      L.held = hold
      island(ctx, m, hold and "held" or "up")
      fault(ctx, { kind = "held", learner = m, begin = hold })
    end
  end
end

-- runtime.elastic = false in data parallel: a failure rolls every learner back (below).
local begin_rollback

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
    info.wall_s = elapsed(ctx)
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
    end
    requorum(ctx)
    hold_others(ctx)
  elseif ev.type == "lost" then
    if L then L.lost = true end
    if L and not ctx.supervising then island(ctx, ev.learner, "down") end
    fault(ctx, { kind = "lost", learner = ev.learner, text = ev.text, detected_s = ev.clock - ctx.t_start })
    if ctx.job_rollbacks and L and L.pid and not ctx.rolling then -- hung (paused) or cut off: everyone goes back
      local paused = L.state == "paused"
      begin_rollback(ctx, ev.learner, paused and "pause" or "lost", paused and L.resume_at or elapsed(ctx))
    end
    requorum(ctx)
    hold_others(ctx)
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

-- ---- the learner processes (run) ----

local function learner_argv(ctx, m, fresh, rollback)
  local o = ctx.opts
  local argv = { diloco.proc.self_exe(), "learner", o.recipe_path, "--connect", ctx.address, "--id", tostring(m),
    "--out", string.format("%s/learner-%d", ctx.out, m), "--secret-file", ctx.secret_file, "--run-id", ctx.run_id,
    "--quiet" }
  if fresh then argv[#argv + 1] = "--overwrite" end -- a new run: nothing of an earlier one is continued
  if rollback then
    argv[#argv + 1] = "--restart-at"
    argv[#argv + 1] = tostring(rollback)
  end
  for _, s in ipairs(o.set or {}) do
    argv[#argv + 1] = "--set"
    argv[#argv + 1] = s
  end
  return argv
end

local function spawn(ctx, m, fresh, rollback)
  local L = ctx.learners[m]
  local dir = string.format("%s/learner-%d", ctx.out, m)
  diloco.mkdir_p(dir)
  if fresh then -- a new run: the display must not read an earlier run's progress
    os.remove(dir .. "/metrics.jsonl")
    if L.tail then L.tail:close() end
    L.tail, L.progress = nil, nil
  end
  local threads = tostring(ctx.recipe.threads or 1)
  local argv = learner_argv(ctx, m, fresh, rollback)
  argv.env = { OMP_NUM_THREADS = threads, OPENBLAS_NUM_THREADS = threads, DILOCO_SUPERVISOR = tostring(diloco.proc.pid()) }
  local R = ctx.recipe.islands.list[m].ranks
  L.ranks = R
  if R then
    -- an island of R ranks: one mpirun job on this machine (its ranks inherit the
    -- environment), unbound (several jobs share the cores), tied to this process
    for k = 0, R - 1 do os.remove(string.format("%s/rank-%d.pid", dir, k)) end
    table.move(argv, 1, #argv, 7, argv)
    argv[1], argv[2], argv[3], argv[4], argv[5], argv[6] = ctx.mpirun, "--oversubscribe", "--bind-to", "none", "-np",
      tostring(R)
    argv.env.OMPI_ALLOW_RUN_AS_ROOT, argv.env.OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = "1", "1"
    -- a rank that died ends the job at once: the others are killed without the second
    -- of grace mpirun gives by default (rank 0 takes a TERM for a clean stop, and a rank
    -- whose peer died is stuck in a collective that never completes)
    argv.env.OMPI_MCA_odls_base_sigkill_timeout = "0"
    argv.parent_death = "KILL"
  end
  argv.stdout, argv.stderr = dir .. "/log", dir .. "/log"
  local pid, err = diloco.proc.spawn(argv)
  if not pid then fail("starting learner %d: %s", m, err) end
  L.pid, L.state, L.started = pid, "running", elapsed(ctx)
  island(ctx, m, "up")
  L.restart_at, L.bye, L.joined = nil, false, false
  return pid
end

-- The last lines of a learner's log, for a message about its death.
local function log_tail(ctx, m)
  local f = io.open(string.format("%s/learner-%d/log", ctx.out, m), "r")
  if not f then return "" end
  local lines = {}
  for line in f:lines() do
    lines[#lines + 1] = line
    if #lines > 3 then table.remove(lines, 1) end
  end
  f:close()
  return table.concat(lines, " | ")
end

-- Reaps the learners that ended: done, killed by chaos, crashed (restart with backoff).
local function reap(ctx)
  for m, L in ipairs(ctx.learners) do
    if L.pid then
      local st = diloco.proc.wait(L.pid)
      if st then
        L.pid = nil
        local now = elapsed(ctx)
        island(ctx, m, "off") -- (gone: down or done below, else no measure covers it)
        if L.stop_expected then -- killed because a non-elastic run cannot go on
          L.state = "stopped"
        elseif L.chaos_kill and ctx.stopping then -- killed by chaos or a rollback, reaped after a stop
          L.chaos_kill = nil
          L.state = "stopped"
        elseif L.chaos_kill then -- chaos (or a rollback) took it: back after its down time
          L.chaos_kill = nil
          L.state = "down"
          island(ctx, m, "down")
        elseif st.exited == 0 then
          L.state = "done"
          island(ctx, m, "done")
        elseif ctx.stopping then
          L.state = "stopped"
        else
          L.crashes = L.crashes + 1
          local why = st.exited and string.format("exit status %d", st.exited)
            or string.format("signal %s", st.name or tostring(st.signal))
          local tail = log_tail(ctx, m)
          if st.exited == 2 or L.crashes > ctx.rt.restarts then -- a usage error repeats: do not restart it
            L.state = "failed"
            fault(ctx, { kind = "crash", learner = m, text = why .. ": " .. tail, restart = false })
            if ctx.job_rollbacks then -- non-elastic: without it nobody can go on
              for j, O in ipairs(ctx.learners) do
                if O.pid then
                  signal_learner(ctx, j, "KILL")
                  O.chaos_kill = nil
                end
                if O.state ~= "failed" then O.stop_expected = true end
                if not O.pid and O.state ~= "failed" then O.state = "stopped" end
              end
              ctx.rolling = nil
              ctx.failed_learner = string.format("learner %d failed for good (%s): a non-elastic run cannot go on "
                .. "without it", m, why)
            end
            say(ctx, "learner %d failed (%s): %s", m, why, tail)
          else
            local wait = math.min(M.RESTART_MAX, M.RESTART_MIN * 2 ^ (L.crashes - 1))
            L.state, L.restart_at, L.down_cause = "down", now + wait, "crash"
            island(ctx, m, "down")
            if ctx.job_rollbacks then begin_rollback(ctx, m, "crash", now + wait) end
            fault(ctx, { kind = "crash", learner = m, text = why .. ": " .. tail, restart_in = wait })
            say(ctx, "learner %d crashed (%s), restarting in %g s: %s", m, why, wait, tail)
          end
        end
      end
    end
  end
end

local function restart_due(ctx)
  local now = elapsed(ctx)
  -- the run is over once every learner that is not down has finished: one still down is
  -- not restarted to train on alone (sim's run ends at its horizon too)
  if not ctx.rolling then
    local finished, up = false, false
    for _, L in ipairs(ctx.learners) do
      if L.state == "done" then finished = true
      elseif L.state ~= "down" and L.state ~= "failed" and L.state ~= "stopped" then up = true end
    end
    if finished and not up then
      for m, L in ipairs(ctx.learners) do
        if L.state == "down" then
          L.state = "done"
          fault(ctx, { kind = "restart", learner = m, skipped = "the others finished: the run is over" })
        end
      end
    end
  end
  for m, L in ipairs(ctx.learners) do
    if L.state == "down" and L.restart_at and now >= L.restart_at and not ctx.stopping and not ctx.rolling then
      spawn(ctx, m)
      L.restarted_at, L.rejoined, L.recovered = now, false, false
      ctx.restarts = ctx.restarts + 1
      fault(ctx, { kind = L.down_cause or "kill", learner = m, begin = false })
    end
  end
end

-- ---- non-elastic data parallel: rollback ----
--
-- A failure (a kill, a crash, a learner lost by timeout) stops the job: every learner is
-- killed, and once the failed one's down time is over all start again from the newest
-- checkpoint every one of them holds (checkpoint.every), model and optimizer included
-- (learner --restart-at STEP); the steps past it are lost work, taken out of the goodput.
-- The syncer starts again from a checkpoint of its own (a new epoch: nothing the killed
-- processes sent is merged; the first gradient, for STEP + 1, sets its round).

begin_rollback = function(ctx, m, cause, back_at)
  local now = elapsed(ctx)
  -- stopping (a signal): no rollback begins; the losses of the learners a rollback or the
  -- stop killed arrive after it and are not failures to roll back from
  if ctx.stopping then return end
  if ctx.rolling then -- another failure meanwhile: all wait for the later one
    ctx.rolling.back_at = math.max(ctx.rolling.back_at, back_at)
    -- and it too is restarted by rollback_due with the others, never alone: a learner
    -- restarted alone would keep the rollback waiting for its process for ever
    if ctx.learners[m] then ctx.learners[m].restart_at = nil end
    return
  end
  ctx.rolling = { since = now, learner = m, cause = cause, back_at = back_at }
  ctx.job_rollbacks = ctx.job_rollbacks + 1
  for j, L in ipairs(ctx.learners) do
    if L.pid then
      L.chaos_kill = true -- reaped as down, not as a crash
      signal_learner(ctx, j, "KILL")
    end
    if L.state == "done" then L.state = "down" end
    L.slow, L.restart_at = nil, nil -- restarted by rollback_due, all together
    island(ctx, j, "down")
    if j ~= m or not L.down_cause or L.down_cause == "rollback" then L.down_cause = j == m and cause or "rollback" end
  end
  fault(ctx, { kind = "job_rollback", learner = m, begin = true, cause = cause, back_in = math.max(0, back_at - now) })
end

local function rollback_due(ctx)
  local rb = ctx.rolling
  if not rb or ctx.stopping or elapsed(ctx) < rb.back_at then return end
  for _, L in ipairs(ctx.learners) do
    if L.pid then return end -- not every process reaped yet
  end
  local Mn = ctx.recipe.islands.count
  local lists, count, K = {}, {}, 0
  for m = 1, Mn do
    lists[m] = diloco.rundir.checkpoints(string.format("%s/learner-%d", ctx.out, m))
    for _, c in ipairs(lists[m]) do count[c.step] = (count[c.step] or 0) + 1 end
  end
  for step, n in pairs(count) do
    if n == Mn and step > K then K = step end
  end
  -- past K is another timeline now: its checkpoints go, its merged tokens are lost work
  for m = 1, Mn do
    for _, c in ipairs(lists[m]) do
      if c.step > K then os.remove(c.path) end
    end
  end
  local lost_steps, lost_tokens = math.max(0, (ctx.dp_step or 0) - K), 0
  for v, u in pairs(ctx.dp_useful) do
    if v > K then
      lost_tokens = lost_tokens + u
      ctx.dp_useful[v] = nil
    end
  end
  ctx.account:set_useful_tokens(math.max(0, ctx.account:useful_tokens() - lost_tokens))
  ctx.dp_step = K
  ctx.rolled_back_steps = ctx.rolled_back_steps + lost_steps
  ctx.rolled_back_tokens = ctx.rolled_back_tokens + lost_tokens
  local t0 = diloco.clock()
  save_syncer(ctx)
  local st = ctx.syncer:stats()
  ctx.bytes_prev_in = (ctx.bytes_prev_in or 0) + st.bytes_in
  ctx.bytes_prev_out = (ctx.bytes_prev_out or 0) + st.bytes_out
  ctx.syncer:close()
  ctx.syncer = nil
  local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
  M.start_syncer(ctx, ctx.address, list[#list] and list[#list].path or nil)
  local now = elapsed(ctx)
  for m, L in ipairs(ctx.learners) do
    L.rolled_back_steps = (L.rolled_back_steps or 0) + lost_steps
    spawn(ctx, m, false, K)
    L.restarted_at, L.rejoined, L.recovered = now, false, false
    ctx.restarts = ctx.restarts + 1
  end
  ctx.rolling = nil
  fault(ctx, { kind = "job_rollback", learner = rb.learner, begin = false, cause = rb.cause, step = K,
    rolled_back_steps = lost_steps, rolled_back_tokens = lost_tokens, latency = now - rb.since,
    syncer_s = diloco.clock() - t0, epoch = ctx.syncer:epoch() })
end

-- ---- chaos on real processes ----

-- The recipe's fault schedule as sim builds it (islands.chaos over core/chaos.h: scripted
-- and random faults merged by one set of rules, ties in one order), read through its
-- cursor (Chaos:due) on the wall clock since the learners started; nil without faults.
-- The MPI rank a scripted kill names, by (learner, at): a merged kill keeps the first's at.
local function chaos_schedule(ctx)
  local r = ctx.recipe
  local ch = islands.chaos(r, ctx.opts.horizon or 3600)
  ctx.chaos_ranks = {}
  for _, e in ipairs(r.chaos and r.chaos.events or {}) do
    if e.rank and e.kind == "kill" then ctx.chaos_ranks[e.learner .. "@" .. e.at] = e.rank end
  end
  return ch
end

-- A slow fault of learner m began or ended at t: its step time is now the product of the
-- factors of those under way (chaos.h); none left, it runs at full speed again.
local function slow_changed(ctx, m, L, t)
  local factor = ctx.chaos:slow_factor(m, t)
  if not L.pid then return end
  if L.slow and factor == 1 then
    L.slow.untl = elapsed(ctx) -- (the duty cycle lets it run, then forgets it)
  elseif L.slow then
    L.slow.factor = factor
  elseif factor ~= 1 then
    -- slowed by a factor: it runs 1/factor of each SLOW_PERIOD (SIGCONT), stopped the rest
    L.slow = { factor = factor, t0 = elapsed(ctx), untl = math.huge, running = true }
  end
end

local function chaos_due(ctx)
  if not ctx.chaos then return end
  while not ctx.stopping do
    local e = ctx.chaos:due(elapsed(ctx) - (ctx.chaos_t0 or 0))
    if not e then break end
    local L = e.learner and ctx.learners[e.learner]
    local down = e.duration or math.huge
    e.rank = e.learner and e.kind == "kill" and ctx.chaos_ranks[e.learner .. "@" .. e.at] or nil
    if not e.begin then
      -- the ends of kills, pauses, cuts, links and syncer outages are the timers their
      -- begins set (their merged durations); a slow's end changes the product
      if e.kind == "slow" and L then
        slow_changed(ctx, e.learner, L, e.t)
        if L.pid then fault(ctx, { kind = "slow", learner = e.learner, begin = false }) end
      end
    elseif e.kind == "kill" and L and L.pid then
      L.chaos_kill = true
      L.restart_at, L.down_cause = elapsed(ctx) + down, "kill"
      island(ctx, e.learner, "down")
      local pid = e.rank and L.ranks and rank_pid(ctx, e.learner, e.rank)
      -- one rank of an island: its mpirun ends the job, the island is down as a whole
      if not (pid and diloco.proc.signal_grandchild(L.pid, pid, "KILL")) then signal_learner(ctx, e.learner, "KILL") end
      if L.held then L.held = false end
      fault(ctx, { kind = "kill", learner = e.learner, rank = e.rank, begin = true,
        duration = down < math.huge and down or nil })
      if ctx.job_rollbacks then begin_rollback(ctx, e.learner, "kill", elapsed(ctx) + down) end
    elseif e.kind == "pause" and L and L.pid then
      signal_learner(ctx, e.learner, "STOP")
      L.state, L.resume_at = "paused", elapsed(ctx) + down
      island(ctx, e.learner, "paused")
      fault(ctx, { kind = "pause", learner = e.learner, begin = true, duration = down < math.huge and down or nil })
    elseif e.kind == "slow" and L and L.pid then
      slow_changed(ctx, e.learner, L, e.t)
      fault(ctx, { kind = "slow", learner = e.learner, begin = true, factor = e.factor,
        duration = down < math.huge and down or nil })
    elseif e.kind == "syncer" and ctx.syncer then
      -- the syncer dies (nothing saved at its end) and comes back from its newest checkpoint
      local st = ctx.syncer:stats()
      ctx.bytes_prev_in = (ctx.bytes_prev_in or 0) + st.bytes_in
      ctx.bytes_prev_out = (ctx.bytes_prev_out or 0) + st.bytes_out
      ctx.syncer:close()
      ctx.syncer = nil
      ctx.syncer_back_at = elapsed(ctx) + (down < math.huge and down or 0)
      fault(ctx, { kind = "syncer", begin = true, duration = down < math.huge and down or nil,
        merges_lost = ctx.gm - ctx.merges_saved })
    elseif e.kind == "cut" then
      -- the link stalls both ways (the syncer's side of it); the learner, alive or not, is
      -- held off until it ends (the syncer times it out meanwhile, and it rejoins after)
      ctx.cuts = ctx.cuts or {}
      ctx.cuts[e.learner] = elapsed(ctx) + down
      if ctx.syncer then ctx.syncer:cut(e.learner, down) end
      if L then L.cut_ended, L.cut_recovered = nil, nil end
      fault(ctx, { kind = "cut", learner = e.learner, begin = true, duration = down < math.huge and down or nil })
    elseif e.kind == "link" then
      ctx.link_events = ctx.link_events or {}
      local list = ctx.link_events[e.learner] or {}
      ctx.link_events[e.learner] = list
      list[#list + 1] = { bandwidth = e.bandwidth, latency = e.latency, untl = elapsed(ctx) + down }
      local rate, latency = M.link_of(ctx, e.learner)
      if ctx.syncer then ctx.syncer:shape(e.learner, rate, latency) end
      fault(ctx, { kind = "link", learner = e.learner, begin = true, bandwidth = rate, latency = latency,
        duration = down < math.huge and down or nil })
    elseif L == nil or L.pid then
      fault(ctx, { kind = e.kind, learner = e.learner, begin = true, skipped = "not executed on real processes in this "
        .. "version (kill, pause, slow, cut, link and syncer are)" })
    end
  end
  for m, untl in pairs(ctx.cuts or {}) do
    if elapsed(ctx) >= untl then -- the syncer's driver ended it at this time itself
      ctx.cuts[m] = nil
      ctx.learners[m].cut_ended = elapsed(ctx)
      fault(ctx, { kind = "cut", learner = m, begin = false })
    end
  end
  for m, list in pairs(ctx.link_events or {}) do
    local kept = {}
    for _, le in ipairs(list) do
      if elapsed(ctx) < le.untl then kept[#kept + 1] = le end
    end
    if #kept < #list then
      ctx.link_events[m] = kept
      local rate, latency = M.link_of(ctx, m)
      if ctx.syncer then ctx.syncer:shape(m, rate, latency) end
      fault(ctx, { kind = "link", learner = m, begin = false, bandwidth = rate, latency = latency })
    end
  end
  if not ctx.syncer and ctx.syncer_back_at and elapsed(ctx) >= ctx.syncer_back_at then
    local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
    local last = list[#list]
    restore_counts(ctx, last) -- the merges of that checkpoint: the rest are lost
    local t0 = diloco.clock()
    M.start_syncer(ctx, ctx.address, last and last.path or nil)
    ctx.syncer_back_at = nil
    ctx.syncer_restarts = (ctx.syncer_restarts or 0) + 1
    fault(ctx, { kind = "syncer", begin = false, epoch = ctx.syncer:epoch(), from = last and last.path or nil,
      load_s = diloco.clock() - t0, fresh = not last or nil })
  end
  for m, L in ipairs(ctx.learners) do
    local sl = L.slow
    if sl and L.pid and L.state ~= "paused" then
      local now = elapsed(ctx)
      local run = now >= sl.untl or ((now - sl.t0) % M.SLOW_PERIOD) < M.SLOW_PERIOD / sl.factor
      if run ~= sl.running then
        signal_learner(ctx, m, run and "CONT" or "STOP")
        sl.running = run
      end
      if now >= sl.untl then L.slow = nil end -- (its end's fault event: chaos_due)
    elseif sl and not L.pid then
      L.slow = nil -- it died meanwhile
    end
    if L.state == "paused" and elapsed(ctx) >= L.resume_at and L.pid then
      signal_learner(ctx, m, "CONT")
      L.state = "running"
      island(ctx, m, L.held and "held" or "up")
      fault(ctx, { kind = "pause", learner = m, begin = false })
    end
  end
end

-- ---- the display ----

-- The newest step event of learner m's own metrics (run: its directory is OUT/learner-N),
-- read incrementally; its fault events (a rollback) go into OUT/metrics.jsonl too.
local function learner_progress(ctx, m)
  local L = ctx.learners[m]
  if not ctx.supervising then return L.progress end
  if not L.tail then
    L.tail = io.open(string.format("%s/learner-%d/metrics.jsonl", ctx.out, m), "r")
    if not L.tail then return nil end
  end
  while true do
    local line = L.tail:read("l")
    if not line then break end
    if line:find('"event":"step"', 1, true) then
      local e = diloco.json_decode(line)
      if type(e) == "table" then L.progress = e end
    elseif line:find('"event":"join"', 1, true) and not line:find('"restored"', 1, true) then
      L.progress = nil
    elseif line:find('"event":"fault"', 1, true) then
      local e = diloco.json_decode(line)
      if type(e) == "table" then
        e.event, e.learner, e.learner_wall_s = nil, m, e.wall_s
        fault(ctx, e)
      end
    end
  end
  return L.progress
end

-- What learner m is doing, as the display shows it.  A syncer started by hand (serve)
-- supervises no process: it knows what the learner's connection says.
local function learner_state(ctx, m, L, i)
  if not ctx.supervising then
    if L.bye then return "done" end
    return i.connected and "training" or (L.joined and "lost" or "not joined yet")
  end
  if L.state == "running" then return i.connected and "training" or (L.joined and "lost" or "joining") end
  if L.state == "down" and L.restart_at then
    return string.format("down (%s, back in %.1fs)", L.down_cause or "?", math.max(0, L.restart_at - elapsed(ctx)))
  end
  return L.state
end

-- The run's progress for the display: its step of the recipe's steps and the time left
-- at the pace it has kept since the learners started.
local function progress_text(ctx, now)
  local step, total = ctx.syncer and run_step(ctx) or 0, ctx.recipe.steps
  local ran = now - ctx.account:t0()
  local eta = step > 0 and step < total and ran > 0 and (total - step) * ran / step or nil
  return string.format("step %d/%d%s", step, total, eta and ", ETA " .. diloco.progress.duration(eta) or "")
end

-- The live display: on a terminal a block of lines redrawn every second (a global line,
-- then one per learner), each cut to the terminal's width; otherwise the same lines
-- every 5 s.  Its shares are the account's (core/account.h), as of now: what the end
-- table will say, with the time since each learner's last report still to come.
local function display(ctx, force)
  local now = elapsed(ctx)
  local tty = diloco.isatty(2)
  local every = ctx.opts.display_every or (tty and 1 or 5)
  if ctx.quiet or not ctx.syncer or (not force and now - (ctx.last_display or -1e9) < every) then return end
  ctx.last_display = now
  local st = ctx.syncer:stats()
  local lines = {}
  for m, L in ipairs(ctx.learners) do
    local i = ctx.syncer:learner(m)
    local p = learner_progress(ctx, m)
    local tps = p and p.tokens_per_s or (i.step_time > 0 and ctx.tokens_per_batch / i.step_time) or 0
    M.island_work(ctx, m, i) -- what the end reads, as of now
    local a = ctx.account:row(m, now)
    lines[#lines + 1] = string.format("  L%-2d %-22s step %6d/%d  loss %s  %s tok/s  useful %s  down %s  waiting %s",
      m, learner_state(ctx, m, L, i), p and p.step or i.steps, ctx.recipe.steps,
      p and p.loss and string.format("%.4f", p.loss) or "   -  ", diloco.progress.human(tps),
      string.format("%.0f%%", 100 * a.useful), string.format("%.0f%%", 100 * a.down),
      string.format("%.0f%%", 100 * a.waiting))
  end
  local goodput = ctx.account:goodput(now)
  local head = string.format("[%6.1fs] %s, %d merges, goodput so far %s, %s up / %s down%s", now,
    progress_text(ctx, now), ctx.merges, goodput > 0 and string.format("%.1f%%", 100 * goodput) or "-",
    diloco.progress.human(st.bytes_in + (ctx.bytes_prev_in or 0)) .. "B",
    diloco.progress.human(st.bytes_out + (ctx.bytes_prev_out or 0)) .. "B",
    ctx.last_eval and string.format(", last eval %.4f", ctx.last_eval.loss) or "")
  local width = tty and (diloco.terminal_size(2)) or nil
  local function fit(l) -- (the last column free: a full line would wrap on some terminals)
    return width and width > 1 and #l > width - 1 and l:sub(1, width - 1) or l
  end
  local out = {}
  if tty and ctx.drawn then out[#out + 1] = string.format("\27[%dA", ctx.drawn) end -- up over the last block
  out[#out + 1] = "\27[2K" .. fit(head) .. "\n"
  for _, l in ipairs(lines) do out[#out + 1] = (tty and "\27[2K" or "") .. fit(l) .. "\n" end
  if not tty then out[1] = head .. "\n" end
  io.stderr:write(table.concat(out))
  io.stderr:flush()
  ctx.drawn = tty and (#lines + 1) or nil
end

-- ---- the end ----

local stop_reason = train.stop_reason

-- The uptime's window: H steps at the median step time (one for dp).
local function uptime_window(ctx, step_time)
  return (ctx.recipe.sync.preset == "dp" and 1 or math.max(1, ctx.recipe.sync.H)) * step_time
end

-- What learner m's own metrics (OUT/learner-N/metrics.jsonl, every process it ran as,
-- each from a join event on) say: the last summary, and over all its processes the
-- steps, tokens, train_s, wait_s and wall_s (a killed one wrote no summary: its last
-- step event counts, so up to log.every steps of it are missed) and the start-up seconds.
function M.learner_account(out, m)
  local f = io.open(string.format("%s/learner-%d/metrics.jsonl", out, m), "r")
  if not f then return nil end
  local acc = { steps = 0, tokens = 0, train_s = 0, wait_s = 0, wall_s = 0, startup_s = 0, processes = 0,
    overwritten_s = 0, kept_s = 0, unsent_s = 0, fates = {} }
  local cur
  local function close_cur()
    if not cur then return end
    local e = cur.summary or cur.last
    if e then
      acc.steps = acc.steps + (cur.summary and cur.summary.steps or math.max(0, (e.step or cur.step0) - cur.step0))
      acc.tokens = acc.tokens + math.max(0, (e.tokens or 0) - cur.tok0)
      acc.train_s = acc.train_s + (e.train_s or 0)
      acc.wait_s = acc.wait_s + (e.wait_s or 0)
      acc.wall_s = acc.wall_s + (e.wall_s or 0)
    end
    -- the account of a process that ended with a summary; of a killed one, what its last
    -- step event said it had sent, overwritten and kept (its unsent work, and the steps
    -- since that event, died with it: dropped, core/account.h)
    local a = cur.summary and type(cur.summary.account) == "table" and cur.summary.account
    if not a and not cur.summary and cur.last and cur.last.overwritten_s then
      a = { overwritten_s = cur.last.overwritten_s, kept_s = cur.last.kept_s, sent_s = cur.last.sent_s,
        sent_steps = cur.last.sent_steps }
    end
    if a then
      for k, v in pairs(a) do
        if type(v) == "number" and v >= 0 and v < math.huge then acc.fates[k] = (acc.fates[k] or 0) + v end
      end
      acc.overwritten_s, acc.kept_s, acc.unsent_s = acc.fates.overwritten_s or 0, acc.fates.kept_s or 0,
        acc.fates.unsent_s or 0
    end
    cur = nil
  end
  for line in f:lines() do
    local kind = line:match('"event":"(%a+)"')
    if kind == "join" or kind == "step" or kind == "summary" then
      local e = diloco.json_decode(line)
      if type(e) == "table" then
        if kind == "join" then
          close_cur()
          cur = { step0 = e.step or 0, tok0 = e.tokens or 0 }
          acc.processes = acc.processes + 1
          acc.startup_s = acc.startup_s + (e.startup_s or 0)
        elseif cur and kind == "step" then
          cur.last = e
        elseif cur then
          cur.summary, acc.summary = e, e
        end
      end
    end
  end
  close_cur()
  f:close()
  return acc
end

-- Learner m's work for the account (core/account.h), from what its processes measured
-- (its own metrics, when its directory is here: M.learner_account) and the syncer's
-- record i: computing and waiting, its compute by fate, the steps of it merged, and its
-- healthy rate, tokens over its compute (else the fastest step time it reported, not the
-- last, which a loaded host's last steps can make slower than its run, and its batch;
-- a value no learner could report is no rate).  Returns the work, the learner's account
-- (or nil) and its steps and tokens over every process.
function M.island_work(ctx, m, i, acc)
  local r = ctx.recipe
  acc = acc or M.learner_account(ctx.out, m)
  local own = acc and acc.processes > 0
  -- (else the syncer's record: the tokens its last heartbeat reported, in steps of the
  -- island's batch; its schedule step is more when it caught up with the others' rounds)
  local tpb = ctx.loaders.tokens_per_batch * (r.islands.list[m].batch or r.data.batch) / r.data.batch
  local heard = i.tokens and i.tokens > 0 and tpb > 0 and math.floor(i.tokens / tpb + 0.5) or i.steps
  local ls = acc and acc.summary or {}
  local steps = own and acc.steps or ls.steps or heard
  local tokens = own and acc.tokens or ls.tokens or i.tokens
  local tps = acc and acc.train_s > 0 and tokens and tokens / acc.train_s or nil
  local step_t = (i.best_step_time or 0) > 0 and i.best_step_time or i.step_time
  if not tps and step_t and step_t > 0 and ctx.tokens_per_batch then
    tps = ctx.tokens_per_batch * ((r.islands.list[m].batch or r.data.batch) / r.data.batch) / step_t
  end
  if tps and not (tps > 0 and tps < math.huge) then tps = nil end
  local function seconds(x) return type(x) == "number" and x >= 0 and x < math.huge and x or 0 end
  -- without its metrics (a syncer started by hand): its compute from the steps it reported
  -- at its step time, the fate of the unmerged ones unknown (core/account.h, work.steps)
  local busy = own and acc.train_s or seconds(seconds(steps) * seconds(i.step_time))
  ctx.account:set_work(m, { busy_s = seconds(busy), idle_s = seconds(acc and acc.wait_s)
    + seconds(acc and acc.startup_s), nominal_tps = tps or 0, merged_steps = seconds(i.merged_steps),
    steps = not own and seconds(steps) or 0, fates = acc and acc.fates or nil })
  return acc, steps, tokens, tps
end

-- Tokens the learners trained so far, every process of each: as their own metrics last
-- said (run; up to log.every steps behind), else as their heartbeats to the syncer said.
tokens_so_far = function(ctx)
  local total = 0
  for m = 1, #ctx.learners do
    local acc = ctx.supervising and M.learner_account(ctx.out, m)
    if acc and acc.processes > 0 then
      total = total + acc.tokens
    else
      local ok, i = pcall(ctx.syncer.learner, ctx.syncer, m)
      total = total + (ok and i and i.tokens or 0)
    end
  end
  return total
end

local function finish(ctx, err)
  local r = ctx.recipe
  if not ctx.syncer then -- stopped while it was down: back from its checkpoint, to save the model
    local list = diloco.rundir.checkpoints(ctx.out .. "/syncer")
    local last = list[#list]
    restore_counts(ctx, last)
    local ok, e = pcall(M.start_syncer, ctx, ctx.address, last and last.path or nil)
    if not ok then error(e, 0) end
  end
  local flushed = pcall(ctx.syncer.flush, ctx.syncer)
  pcall(pump_syncer, ctx, 0.2)
  pcall(save_syncer, ctx) -- the end, or a signal: what a --resume continues from
  local final, whole
  local fev = {}
  local ok, e, w = pcall(evaluate_global, ctx, true, fev)
  if ok then
    final, whole = e, w
    fev.step, fev.loss, fev.accuracy, fev.wall_s, fev.final = r.steps, e.loss, e.accuracy, elapsed(ctx), true
    fev.tokens = tokens_so_far(ctx)
    ctx.metrics:write("eval", fev)
  else
    err = err or string.format("final evaluation: %s", plain(e))
  end
  local meta = { ["diloco.recipe"] = r.name or "", ["diloco.step"] = tostring(r.steps),
    ["diloco.recipe_json"] = ctx.recipe_json }
  if type(r.model) == "table" then meta["diloco.model"] = diloco.json_encode(r.model, { sort_keys = true }) end
  local saved, serr
  if pcall(load_global, ctx) then saved, serr = diloco.save_safetensors(ctx.out .. "/model.safetensors", ctx.plist, meta)
  else serr = "no global model (dp: no learner saved one)" end
  local save_error = not saved and string.format("saving the global model to %s: %s", ctx.out, plain(serr)) or nil
  stop_reason(ctx)
  if not err and ctx.metrics.failed then err = ctx.metrics.failed end
  if not err and ctx.failed_learner then err = ctx.failed_learner end
  if not err and save_error then err = save_error end
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
    local acc, lsteps, ltokens, tps = M.island_work(ctx, m, i)
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
    final_eval_loss = final and final.loss, final_eval_accuracy = final and final.accuracy,
    goodput = t_end > t0 and ctx.account:goodput(t_end) or nil,
    uptime = (median(step_times) or 0) > 0 and ctx.account:uptime(t_end, uptime_window(ctx, median(step_times)))
      or nil,
    bytes_up = st.bytes_in + (ctx.bytes_prev_in or 0), bytes_down = st.bytes_out + (ctx.bytes_prev_out or 0), wall_s = wall, idle = idle, train_s = t_end - (ctx.t_train_start or 0),
    tokens_per_s = tokens / math.max(t_end - (ctx.t_train_start or 0), 1e-9), params = ctx.n_params,
    interrupted = ctx.signal ~= nil, signal = ctx.signal, error = err, save_error = save_error, recipe = r.name,
    out = ctx.out, gemm = diloco.gemm_backend(), threads = diloco.num_threads(), merges = ctx.merges,
    rejects = ctx.rejects, faults = ctx.faults, restarts = ctx.restarts, useful_tokens = ctx.account:useful_tokens(),
    refused = st.refused, refused_by = next(st.refused_by or {}) and st.refused_by or nil,
    merges_lost = (ctx.merges_lost or 0) + (ctx.merges_lost_before or 0),
    epoch = ctx.syncer:epoch(), syncer_restarts = ctx.syncer_restarts or 0,
    bytes_by_type = st.bytes_by_type, per_learner = per, run_id = ctx.run_id, address = ctx.address,
    flushed = flushed or nil, runtime = "processes", absent = ctx.absent and #ctx.absent > 0 and ctx.absent or nil,
    flushed = flushed or nil, runtime = "processes", job_rollbacks = ctx.job_rollbacks,
    rolled_back_steps = ctx.rolled_back_steps, rolled_back_tokens = ctx.rolled_back_tokens,
    account = account_total,
  }
  train.all_fields(summary, whole)
  ctx.metrics:write("summary", summary)
  local cok, cerr = ctx.metrics:close()
  if not cok and not err then
    err = cerr
    summary.error = err
  end
  ctx.syncer:close()
  ctx.srd:close()
  ctx.rd:close()
  diloco.clear_signals()
  if not ctx.quiet then
    io.stderr:write("where each learner's wall time went (docs/runtime.md, the account):\n" ..
      diloco.account.table_text(accounts, account_total, merged_n) .. "\n")
    io.stderr:write(string.format("%s: %d islands, %d steps%s; goodput %s, uptime %s, %s up / %s down, %d merges; %s\n",
      ctx.signal and ("stopped by " .. ctx.signal) or (err and "failed" or "done"), r.islands.count, steps,
      final and string.format(", final eval loss %.4f (the global model, after the final flush%s)", final.loss,
        whole and whole ~= final and string.format("; the whole eval split, %d rows: %.4f", whole.rows, whole.loss)
        or "") or "",
      summary.goodput and string.format("%.1f%%", 100 * summary.goodput) or "?",
      summary.uptime and string.format("%.1f%%", 100 * summary.uptime) or "?",
      diloco.progress.human(st.bytes_in) .. "B", diloco.progress.human(st.bytes_out) .. "B", st.merges,
      saved and ("saved " .. ctx.out .. "/model.safetensors") or "nothing saved"))
  end
  return summary, err
end

-- Everything is over when every learner has left: its process is gone for good (run), or
-- (serve) it said BYE (before a --resume too: the syncer's checkpoint says so), or, with
-- no learner connected, it stayed away runtime.join_timeout (never joined, or lost and
-- not back): those are named (a fault event of kind absent) and the run ends without them.
local function all_done(ctx)
  local away = {}
  for m, L in ipairs(ctx.learners) do
    if ctx.supervising then
      if L.state ~= "done" and L.state ~= "failed" and L.state ~= "stopped" then return false end
    else
      if not ctx.syncer then return false end
      local i = ctx.syncer:learner(m)
      if not i.bye then
        if i.connected or i.absent < ctx.rt.join_timeout then return false end
        away[#away + 1] = { m = m, info = i }
      end
    end
  end
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
    for _, L in ipairs(ctx.learners) do slowing = slowing or L.slow ~= nil end
    pump_syncer(ctx, slowing and 0.01 or 0.05)
    if ctx.supervising then
      reap(ctx)
      restart_due(ctx)
      if ctx.job_rollbacks then rollback_due(ctx) end
      chaos_due(ctx)
    end
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
      for m, L in ipairs(ctx.learners) do
        if L.pid then
          if L.state == "paused" or L.slow then signal_learner(ctx, m, "CONT") end
          L.slow = nil
          signal_learner(ctx, m, "TERM")
        elseif L.state == "down" then -- waiting for its restart (or a rollback's): it stays down
          L.state = "stopped"
        end
      end
      ctx.rolling = nil
      if not ctx.supervising then break end
    end
    if ctx.stopping and elapsed(ctx) - ctx.stopping > M.STOP_TIMEOUT then
      for m, L in ipairs(ctx.learners) do
        if L.pid then
          say(ctx, "learner %d did not stop within %d s: killed", m, M.STOP_TIMEOUT)
          signal_learner(ctx, m, "KILL")
        end
      end
    end
    if ctx.supervising then
      for m, L in ipairs(ctx.learners) do
        if L.state == "running" and not L.joined and elapsed(ctx) - L.started > ctx.rt.join_timeout then
          say(ctx, "learner %d did not join within %g s: killed (its log: %s)", m, ctx.rt.join_timeout, log_tail(ctx, m))
          L.chaos_kill = nil
          signal_learner(ctx, m, "KILL")
        end
      end
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
-- mpirun's path, for islands of several ranks; a clear error when it (or MPI in this
-- build) is missing.
function M.find_mpirun(m, R)
  if not diloco.mpi.available then fail("islands[%d].ranks = %d: %s", m, R, diloco.mpi.why) end
  for dir in (os.getenv("PATH") or "/usr/bin:/bin"):gmatch("[^:]+") do
    local path = dir .. "/mpirun"
    local f = io.open(path, "r")
    if f then
      f:close()
      return path
    end
  end
  fail("islands[%d].ranks = %d: mpirun is not on PATH (install openmpi-bin: scripts/setup does)", m, R)
end

function M.serve(r, opts)
  local ctx = prepare(r, opts)
  ctx.supervising = opts.supervise
  if ctx.supervising and not ctx.rt.elastic and r.sync.preset == "dp" then
    ctx.job_rollbacks, ctx.dp_useful, ctx.rolled_back_steps, ctx.rolled_back_tokens = 0, {}, 0, 0
  end
  local ok, err = pcall(function()
    ctx.tokens_per_batch = ctx.loaders.tokens_per_batch
    say(ctx, "%s: %d islands (%s), %s parameters; syncer at %s (run %s)", r.name or "run", r.islands.count,
      r.sync.preset, diloco.progress.human(ctx.n_params), ctx.address, ctx.run_id)
    if ctx.supervising then
      ctx.chaos = chaos_schedule(ctx)
      for m = 1, r.islands.count do
        if r.islands.list[m].ranks and not ctx.mpirun then ctx.mpirun = M.find_mpirun(m, r.islands.list[m].ranks) end
      end
      for m = 1, r.islands.count do spawn(ctx, m, true) end
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
  if ferr then error({ diloco_error = tostring(ferr), code = 1, summary = summary }, 0) end
  return summary, ctx.signal ~= nil, ctx.signo
end

function M.run(r, opts)
  opts.supervise = true
  return M.serve(r, opts)
end

return M

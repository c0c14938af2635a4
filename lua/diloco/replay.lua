-- diloco.replay: `diloco-lua sim --replay OUT`, a finished real run re-executed from its
-- merge tape in one process, with its final global parameters compared bit for bit.
--
--   local summary = diloco.replay.run("runs/decoupled")   -- raises if they differ
--
-- The tape (docs/runtime.md, "The merge tape") has three parts:
--   OUT/tape.json              the recipe's path and --set overrides the run started with;
--   OUT/metrics.jsonl          the syncer's merges in order: fragment, new version and each
--                              contributor's learner, incarnation, base version, steps, tokens;
--   OUT/learner-N/metrics.jsonl  each learner's join (its schedule step), every apply:
--                              fragment, version, step boundary (inner steps since the join),
--                              resync; and every move of its schedule step (`phase`: a
--                              catch-up or a whole resync, with its boundary and new step).
-- Replay builds every learner as its process did (model and dropout from the seed, its
-- shard, its inner optimizer, the learners' thread count) and drives the same state
-- machines the run did (diloco.machine: core/learner.c, core/syncer.c), with no clock: a
-- learner steps until its next boundary needs a fragment version not merged yet; a merge
-- runs once each contribution it took has been made, and the syncer is handed exactly
-- those (the round closes when all live learners sent, else by a flush).  Nothing in the
-- arithmetic depends on time, so the parameters come out those of the run, or the replay
-- names the first place it diverged (a version applied, a contribution made, a merge).
--
-- Not replayed (refused with the reason): runs in which a learner process restarted or the
-- syncer resumed from a checkpoint (their state came from checkpoints the tape does not
-- hold), a learner rolled back (a non-finite step), data-parallel runs with resyncs, runs
-- that did not finish.
local diloco = require "diloco"
local train = require "diloco.train"
local island = require "diloco.island"
local islands = require "diloco.islands"
local M = {}

local function fail_code(code, fmt, ...)
  error({ diloco_error = string.format(fmt, ...), code = code }, 0)
end
local function refuse(fmt, ...) fail_code(2, "sim --replay: " .. fmt, ...) end
local function diverged(fmt, ...) fail_code(1, "sim --replay: diverged from the tape: " .. fmt, ...) end

local function read_json_lines(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local list, n = {}, 0
  for line in f:lines() do
    n = n + 1
    if line ~= "" then
      local ok, v = pcall(diloco.json_decode, line)
      if not ok or type(v) ~= "table" then
        f:close()
        refuse("%s line %d is not a JSON record", path, n)
      end
      list[#list + 1] = v
    end
  end
  f:close()
  return list
end

-- The whole file, or nil when it cannot be opened (also what the specs and
-- scripts/experiments read files with).
local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
M.read_file = read_file

-- The first path at which two decoded JSON values differ, or nil.
local function json_diff(a, b, path)
  if type(a) ~= type(b) then return path end
  if type(a) ~= "table" then return a ~= b and path or nil end
  local keys = {}
  for k in pairs(a) do keys[#keys + 1] = k end
  for k in pairs(b) do if a[k] == nil then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for _, k in ipairs(keys) do
    local d = json_diff(a[k], b[k], path == "" and tostring(k) or path .. "." .. tostring(k))
    if d then return d end
  end
  return nil
end

-- A launcher's run of a syncer in shards (`syncer --shard I/S`, docs/shards.md): OUT is the
-- run's root, each shard's directory OUT/shard-K with its own tape; nil for any other OUT.
local function shard_dirs(out)
  if read_file(out .. "/tape.json") then return nil end
  local dirs = {}
  for k = 1, 16 do
    local d = string.format("%s/shard-%d", out, k)
    if not read_file(d .. "/tape.json") then break end
    if read_file(d .. "-standby/metrics.jsonl") then
      refuse("shard %d of this run had a standby (%s-standby): the merges a standby recorded for its primary carry "
        .. "no weights or arrival times, so this version cannot replay it", k, d)
    end
    dirs[k] = d
  end
  return #dirs > 0 and dirs or nil
end

-- The run's recipe, loaded as the run loaded it, checked against OUT/recipe.json (a
-- launcher's shards: shard 1's).
local function load_recipe(out, opts)
  local dirs = shard_dirs(out)
  out = dirs and dirs[1] or out
  local header = read_file(out .. "/tape.json")
  if not header then
    refuse("%s/tape.json is missing: OUT must be the directory of a finished run of several islands (diloco-lua " ..
      "run or syncer), made by this version", out)
  end
  local tape = diloco.json_decode(header)
  local path = opts.recipe or tape.recipe
  local r, lerr = diloco.recipe.load(path)
  if not r then refuse("the run's recipe: %s", lerr) end
  for _, s in ipairs(opts.recipe and (opts.set or {}) or tape.set or {}) do
    local ok, e = pcall(diloco.recipe.set, r, s)
    if not ok then refuse("--set %s: %s", s, tostring(e)) end
  end
  local valid, problems = diloco.recipe.validate(r)
  if not valid then refuse("the run's recipe %s: %s", path, table.concat(problems, "; ")) end
  if r.islands.standbys then -- (docs/shards.md, "Standbys under run and sim")
    refuse("the run's syncer had standbys (islands.standbys): the merges a standby recorded for its primary carry no "
      .. "weights or arrival times, so this version cannot replay it")
  end
  local saved = read_file(out .. "/recipe.json")
  if saved then
    local now = diloco.json_decode(diloco.json_encode(require("diloco.recipe_json").effective(r), { sort_keys = true }))
    local d = json_diff(diloco.json_decode(saved), now, "")
    if d then
      refuse("the recipe %s is not the one the run used any more: %s/recipe.json differs at %s", path, out, d)
    end
  end
  return r, tape
end

-- The tape's two halves, checked for what replay cannot re-execute.  A launcher's shards:
-- every shard's merges, each tagged with its shard, and shard 1's summary once all ended.
local function read_tape(out, r)
  local Mn = r.islands.count
  local dirs = shard_dirs(out)
  local ev = {}
  for k, d in ipairs(dirs or { out }) do
    local list = read_json_lines(d .. "/metrics.jsonl")
    if not list then refuse("%s/metrics.jsonl is missing", d) end
    local ended = false
    for _, e in ipairs(list) do
      if e.event == "merge" and dirs then e.shard = k end
      if e.event == "summary" then
        ended = true
        if k > 1 then e = nil end
      end
      if e then ev[#ev + 1] = e end
    end
    if dirs and not ended then refuse("%s/metrics.jsonl has no summary: shard %d did not finish", d, k) end
  end
  local merges, summary = {}, nil
  for _, e in ipairs(ev) do
    if e.event == "merge" then merges[#merges + 1] = e
    elseif e.event == "resume" then
      refuse("the syncer of this run resumed from its checkpoint %s: its state came from a file the tape does not " ..
        "hold (runs with a syncer restart are not replayed)", tostring(e.from))
    elseif e.event == "summary" then summary = e end
  end
  if not summary then refuse("%s/metrics.jsonl has no summary: the run did not finish", out) end
  local learners = {}
  for m = 1, Mn do
    local path = string.format("%s/learner-%d/metrics.jsonl", out, m)
    local lev = read_json_lines(path)
    if not lev then refuse("%s is missing", path) end
    local L = { id = m, joins = 0, applies = {}, phases = {}, rooms = {}, threads = nil }
    for _, e in ipairs(lev) do
      if e.event == "join" then
        L.joins = L.joins + 1
        L.first_step = e.step
        if e.restored then
          refuse("learner %d restored its optimizer from %s: runs with learner restarts are not replayed", m,
            tostring(e.restored))
        end
      elseif e.event == "apply" then
        if e.boundary == nil then
          refuse("%s: its apply records have no step boundary (written by an older diloco-lua)", path)
        end
        local b = L.applies[e.boundary] or {}
        b[#b + 1] = { fragment = e.fragment, version = e.version, resync = e.resync == true }
        L.applies[e.boundary] = b
      elseif e.event == "fault" and e.kind == "rollback" then
        refuse("learner %d %s at step %s (%s): a non-finite step the tape cannot re-execute (runs with rollbacks are "
          .. "not replayed)", m, e.void and "had a void step (its gradient left out of the average)"
          or "rolled back to the last global model", tostring(e.step), tostring(e.text))
      elseif e.event == "phase" then -- its schedule moved, after the boundary's sends
        local ph = L.phases[e.boundary] or {}
        ph[#ph + 1] = e.step
        -- a catch-up (a merge's fragment told) sends what the steps it skips were due to
        ph.catch_up = ph.catch_up or (e.fragment ~= nil and e.fragment >= 1)
        L.phases[e.boundary] = ph
      elseif e.event == "room" then -- the transport's room bound at that boundary: sends waited
        if math.type(e.room) ~= "integer" or e.room < 0 or math.type(e.boundary) ~= "integer" or e.boundary < 1 then
          refuse("%s: a room record with room = %s at boundary %s: expected integers >= 0 and >= 1", path,
            tostring(e.room), tostring(e.boundary))
        end
        L.rooms[e.boundary] = e.room
      elseif e.event == "summary" then
        L.threads = e.threads
        L.summary = e
      end
    end
    if L.joins ~= 1 then
      refuse("learner %d joined %d times (its process restarted): runs with learner restarts are not replayed", m,
        L.joins)
    end
    if not L.summary then refuse("%s has no summary: learner %d did not finish", path, m) end
    learners[m] = L
  end
  return merges, learners, summary
end

local function key(m, p) return m * 65536 + p end

-- Runs the replay of the finished run in OUT.  opts: quiet, recipe and set (another
-- recipe path for the same run, when the recorded one moved).  Returns the summary.
function M.run(out, opts)
  opts = opts or {}
  out = out:gsub("/+$", "")
  local r, tape = load_recipe(out, opts)
  local Mn = r.islands.count
  local merges, tl, run_summary = read_tape(out, r)
  local dp = r.sync.preset == "dp"
  if dp then -- a dp resync moves the learner to another round: its gradient is void, off the tape
    for m = 1, Mn do
      for b in pairs(tl[m].applies) do
        if b > 0 then refuse("learner %d of this data-parallel run was resynced at step boundary %d: a void step " ..
          "is not on the tape (data-parallel runs with resyncs are not replayed)", m, b) end
      end
    end
  end
  local t0 = diloco.clock()
  diloco.set_num_threads(tl[1].threads or r.threads or 1)
  local rt = require("diloco.cluster").runtime(r)

  -- the global model, as the run's syncer made it
  diloco.seed(r.seed)
  local gmodel = island.build_model(r.model, r.seed)
  local gplist = gmodel:parameters()
  local G = diloco.Params(gplist)
  local plan = islands.plan(r, G, #gplist)
  local P = #plan
  local lopts, sopts, run_json = islands.sync_options(r, gplist, rt.heartbeat, 0)
  local syncer = diloco.machine.Syncer { params = G, plan = plan, learners = Mn, learner = lopts, syncer = sopts,
    run_json = run_json,
    manual = true }
  local now = 0
  local function tick() now = now + 1e-3; return now end

  -- store[p][version] = a FRAGMENT message holding that version's payload, kept while an
  -- apply of the tape still needs it (uses[p][version] of them)
  local store, uses = {}, {}
  for m = 1, Mn do
    for _, list in pairs(tl[m].applies) do
      for _, a in ipairs(list) do
        uses[a.fragment] = uses[a.fragment] or {}
        uses[a.fragment][a.version] = (uses[a.fragment][a.version] or 0) + 1
      end
    end
  end
  local avg = {}   -- dp: avg[step] = the GRADIENT_AVG message
  local function keep_sends(acts)
    local merged
    for _, a in ipairs(acts) do
      if a.type == "send" then
        local f = a.msg:fields()
        if f.type == "fragment" and (uses[f.fragment] or {})[f.version] then
          store[f.fragment] = store[f.fragment] or {}
          store[f.fragment][f.version] = store[f.fragment][f.version] or a.msg
        elseif f.type == "gradient_avg" then
          avg[f.version] = avg[f.version] or a.msg
        end
      elseif a.type == "merged" then
        merged = a.merge
      elseif a.type == "rejected" then
        diverged("the syncer rejected a contribution of learner %d to fragment %d (%s)", a.learner, a.fragment,
          a.reason)
      end
    end
    return merged
  end

  -- the learners, each as its process built it
  local L = {}
  for m = 1, Mn do
    local T = tl[m]
    diloco.seed(r.seed)
    -- learner m's island (lua/diloco/island.lua), as its process built it
    local c = island.new(r, { id = m, island = r.islands.list[m], who = "learner " .. m, wait_time = 0.0, tape = T,
      sent = {}, joined = false, done = false })
    c:build()
    c.fragments = P
    local okd, loaders = c:open_data(c.island.batch, c.island.shard, Mn)
    if not okd then refuse("data (island %d): %s", m, train.plain(loaders)) end
    c.sm = diloco.machine.Learner { params = c.params, plan = plan, id = m, learner = lopts, syncer = sopts,
      run_json = run_json }
    keep_sends(assert(syncer:join(m, tick())))
    L[m] = c
  end

  -- The applies the tape has at boundary b of learner c, as two lists of {a = record,
  -- msg = the merged version}: those whose version is merged already, and those not yet.
  local function deliveries(c, b)
    local ready, later = {}, {}
    for _, a in ipairs(c.tape.applies[b] or {}) do
      local msg = store[a.fragment] and store[a.fragment][a.version]
      if msg then ready[#ready + 1] = { a = a, msg = msg } else later[#later + 1] = { a = a } end
    end
    return ready, later
  end

  -- What learner c applied at boundary b (acts: the actions of its calls there) against
  -- the tape: the same fragments and versions (each fragment's apply is its own slice of
  -- the model, so their order does not matter).
  local function check_applied(c, b, acts)
    local function s(x) return x and string.format("fragment %d version %d%s", x.fragment, x.version,
      x.resync and " (resync)" or "") or "nothing" end
    local want, got = {}, {}
    for _, w in ipairs(c.tape.applies[b] or {}) do want[#want + 1] = w end
    for _, a in ipairs(acts) do if a.type == "applied" then got[#got + 1] = a end end
    local function order(x, y) return x.fragment < y.fragment or (x.fragment == y.fragment and x.version < y.version) end
    table.sort(want, order)
    table.sort(got, order)
    for i = 1, math.max(#want, #got) do
      local w, g = want[i], got[i]
      if not w or not g or w.fragment ~= g.fragment or w.version ~= g.version or w.resync ~= g.resync then
        diverged("learner %d at step boundary %d applied %s, the tape has %s", c.id, b, s(g), s(w))
      end
    end
  end

  -- Hands learner c the merged versions of list (deliveries) at boundary b.
  local function deliver(c, list, joining)
    local acts = {}
    for _, d in ipairs(list) do
      local a, msg = d.a, d.msg
      msg:set { learner = c.id, resync = a.resync, steps = joining and c.tape.first_step or 0, held = -1 }
      local res, err = c.sm:receive(msg, tick())
      if not res then diverged("learner %d refused fragment %d version %d: %s", c.id, a.fragment, a.version, err) end
      local u = uses[a.fragment]
      u[a.version] = u[a.version] - 1
      if u[a.version] == 0 then store[a.fragment][a.version] = nil end
      for _, x in ipairs(res) do acts[#acts + 1] = x end
    end
    return acts
  end

  local function record_sends(c, acts)
    for _, a in ipairs(acts) do
      if a.type == "send" then
        local f = a.msg:fields()
        local k = f.type == "gradient" and key(c.id, 0) or key(c.id, f.fragment)
        local list = c.sent[k] or {}
        list[#list + 1] = { base = f.version, steps = f.steps, tokens = f.tokens, msg = a.msg }
        c.sent[k] = list
      end
    end
  end
  -- each learner's link: its contributions are its state machine's, their sends recorded
  -- (its step's end is the boundary's, in advance below, with the tape's deliveries)
  for _, c in ipairs(L) do
    c.link = { contribute = function(p) record_sends(c, assert(c.sm:contribute(p, tick()))) end }
  end

  -- One step of learner c if the tape lets it go on: true when it stepped (or joined).
  local function advance(c)
    if c.done then return false end
    local sm = c.sm
    if not c.joined then
      local ready, later = deliveries(c, 0)
      if #later > 0 then return false end
      local acts = deliver(c, ready, true)
      check_applied(c, 0, acts)
      if sm:state() ~= "training" then
        diverged("learner %d is %s after its join's %d fragments", c.id, sm:state(), #ready)
      end
      c.joined = true
      return true
    end
    if c.mid then -- step b ran; the rest of boundary b's versions, once merged (step_begin)
      local ready, later = deliveries(c, c.mid.b)
      local need = {}
      for _, d in ipairs(ready) do if c.mid.later[d.a] then need[#need + 1] = d end end
      if #need < c.mid.n then return false end
      local acts = c.mid.acts
      for _, x in ipairs(deliver(c, need, false)) do acts[#acts + 1] = x end
      local res = assert(sm:step_begin(tick()))
      for _, x in ipairs(res) do acts[#acts + 1] = x end
      check_applied(c, c.mid.b, acts)
      if sm:state() ~= "training" then
        diverged("learner %d is %s after step boundary %d, where the run went on", c.id, sm:state(), c.mid.b)
      end
      c.mid = nil
      return true
    end
    -- where its process stopped: at `steps`, or earlier when a signal stopped the run
    if sm:schedule_step() >= math.min(r.steps, c.tape.summary.schedule_step or r.steps) then
      c.done = true
      return false
    end
    local b = sm:steps() + 1
    if dp then
      if not c.grad then -- forward and backward; the gradient goes to the syncer
        c.step = sm:schedule_step()
        local _, lr = c:dp_gradient()
        local acts = assert(sm:gradient(c.loaders.tokens_per_batch, tick()))
        record_sends(c, acts)
        c.grad = { lr = lr, version = sm:schedule_step() + 1 }
        return true
      end
      local msg = avg[c.grad.version]
      if not msg then return false end
      msg:set { learner = c.id }
      local acts, err = sm:receive(msg, tick())
      if not acts then diverged("learner %d refused the average of step %d: %s", c.id, c.grad.version, err) end
      local v, taken = c.grad.version, true
      for m = 1, Mn do taken = taken and (L[m] == c or L[m].sm:schedule_step() >= v or L[m].done) end
      if taken then avg[v] = nil end -- every learner has it
      c:dp_apply(c.grad.lr)
      c.grad = nil
      acts = assert(sm:step_done(c.loaders.tokens_per_batch, 0, tick()))
      check_applied(c, b, acts)
      return true
    end
    -- the versions the tape applies at this boundary: those merged already go in before
    -- step_done (applied after its sends, as in the run), the others after it, at the
    -- step_begin that follows (a merge of what this very step sends: tau = 0, blocking)
    local ready, later = deliveries(c, b)
    c.step = sm:schedule_step()
    c:inner_step()
    local acts = {}
    c:contribute_scheduled(c.step)
    for _, x in ipairs(deliver(c, ready, false)) do acts[#acts + 1] = x end
    -- a schedule that moved since the last boundary's sends (a catch-up, a whole resync):
    -- the step the tape says, the latest of them
    local ph = c.tape.phases[b - 1]
    if ph then sm:set_schedule_step(ph[#ph], ph.catch_up) end
    local room = c.tape.rooms[b] -- (the run's transport had room for fewer than were due)
    if room then sm:set_send_room(room) end
    local res = assert(sm:step_done(c.loaders.tokens_per_batch, 0, tick()))
    if room then sm:set_send_room(-1) end
    record_sends(c, res)
    for _, x in ipairs(res) do acts[#acts + 1] = x end
    if #later > 0 then
      local set = {}
      for _, d in ipairs(later) do set[d.a] = true end
      c.mid = { b = b, later = set, n = #later, acts = acts }
      return true
    end
    check_applied(c, b, acts)
    if sm:state() ~= "training" then
      diverged("learner %d is %s after step boundary %d, where the run went on", c.id, sm:state(), b)
    end
    return true
  end

  -- The contributions merge k took, once all of them were made: a list, or nil.
  local function inputs(mg)
    local list = {}
    for i, c in ipairs(mg.contributors) do
      local k = dp and key(c.learner, 0) or key(c.learner, mg.fragment)
      local base = c.base_version or (mg.version - 1 - (c.staleness or 0))
      local found
      for j, s in ipairs(L[c.learner].sent[k] or {}) do
        if dp and s.base == mg.version or (not dp and s.base == base and s.steps == c.steps) then
          found = s
          s.k, s.j = k, j
          break
        end
      end
      if not found then return nil end
      if found.tokens ~= c.tokens then
        diverged("learner %d's contribution to fragment %d (base version %d, %d steps) counts %d tokens, the tape %d",
          c.learner, mg.fragment, base, c.steps, found.tokens, c.tokens)
      end
      list[i] = found
    end
    return list
  end

  -- The tape's merges in the order each shard made them (one syncer: one queue): a shard's
  -- merges depend on each other, the shards' do not (each owns its fragments), and the tape
  -- interleaves them as the run's process polled the shards, not as they happened.
  local queues, order = {}, {}
  for _, mg in ipairs(merges) do
    local s = mg.shard or 1
    if not queues[s] then queues[s] = { at = 1 }; order[#order + 1] = s end
    local q = queues[s]
    q[#q + 1] = mg
  end
  local ki = 1 -- merges done + 1
  -- The next merge of a shard whose contributions were all made (any shard's head when
  -- none is: it names what is missing), and its queue.
  local function next_merge()
    local first
    for _, s in ipairs(order) do
      local q = queues[s]
      local mg = q[q.at]
      if mg then
        first = first or { mg = mg, q = q }
        if inputs(mg) then return mg, q end
      end
    end
    if first then return first.mg, first.q end
  end
  local function merge_next()
    local mg, q = next_merge()
    if not mg then return false end
    local list = inputs(mg)
    if not list then return false end
    q.at = q.at + 1
    local merged
    for i, s in ipairs(list) do
      -- what a learner sent before this one will never be merged: a round takes a learner's
      -- contributions in the order it sent them
      local sent = L[mg.contributors[i].learner].sent[s.k]
      local n = #sent
      table.move(sent, s.j + 1, n, 1)
      for x = n - s.j + 1, n do sent[x] = nil end
      local acts, err = syncer:receive(s.msg, tick())
      if not acts then diverged("merge %d (fragment %d version %d): the syncer refused a contribution: %s", ki,
        mg.fragment, mg.version, err) end
      merged = keep_sends(acts) or merged
    end
    merged = keep_sends(assert(syncer:flush(tick()))) or merged
    if not merged or merged.fragment ~= mg.fragment or merged.version ~= mg.version or merged.count ~= #list then
      diverged("merge %d: the syncer merged %s, the tape fragment %d version %d of %d contributions", ki,
        merged and string.format("fragment %d version %d of %d", merged.fragment, merged.version, merged.count)
          or "nothing", mg.fragment, mg.version, #list)
    end
    ki = ki + 1
    return true
  end

  while true do
    local progress = false
    while merge_next() do progress = true end
    for m = 1, Mn do
      while advance(L[m]) do
        progress = true
        local mg = next_merge()
        if mg and inputs(mg) then break end -- let the syncer catch up
      end
    end
    local all_done = ki > #merges
    for m = 1, Mn do all_done = all_done and L[m].done end
    if all_done then break end
    if not progress then
      local mg = next_merge()
      local waits = {}
      for m = 1, Mn do
        if not L[m].done then
          waits[#waits + 1] = string.format("learner %d at step boundary %d", m, L[m].sm:steps() + 1)
        end
      end
      if mg then
        diverged("merge %d (fragment %d version %d) waits for a contribution no learner made; %s", ki, mg.fragment,
          mg.version, #waits > 0 and table.concat(waits, ", ") .. " wait for versions not merged" or
          "every learner finished")
      end
      diverged("%s wait for fragment versions the tape never merges", table.concat(waits, ", "))
    end
  end

  -- the final global parameters against the run's
  local final = dp and L[1].params or syncer:global(G)
  local saved, meta = diloco.load_safetensors(out .. "/model.safetensors")
  if not saved then refuse("%s/model.safetensors: %s", out, tostring(meta)) end
  diloco.seed(r.seed)
  local rmodel = island.build_model(r.model, r.seed)
  local rplist = rmodel:parameters()
  for _, p in ipairs(rplist) do
    local t = saved[p[1]]
    if not t then refuse("%s/model.safetensors has no tensor %s", out, p[1]) end
    p[2]:copy(t)
  end
  local d = diloco.machine.diff(final, diloco.Params(rplist))
  local steps = 0
  for m = 1, Mn do steps = steps + L[m].sm:steps() end
  local summary = { out = out, recipe = tape.recipe, learners = Mn, preset = r.sync.preset, merges = #merges,
    identical = d == nil, differing = d and d.count or 0, max_abs_diff = d and d.max_abs or 0,
    steps = steps, wall_s = diloco.clock() - t0, threads = diloco.num_threads(), run_final_eval_loss = run_summary.final_eval_loss }
  if d then
    summary.first_difference = { index = d.first, run = d.b, replay = d.a }
    fail_code(1, "sim --replay: the replay's final global parameters differ from %s/model.safetensors in %d of %d " ..
      "floats (first at %d: %.9g against %.9g; largest difference %.3g)", out, d.count, final:numel(), d.first, d.a,
      d.b, d.max_abs)
  end
  if not opts.quiet then
    io.stderr:write(string.format("replayed %s: %d learners, %d merges, %d inner steps in %.1f s: the final global " ..
      "parameters match %s/model.safetensors bit for bit\n", out, Mn, #merges, steps, summary.wall_s, out))
  end
  return summary
end

return M

-- diloco.islands: what every driver of several islands derives from a validated recipe
-- in the same way: the fragment plan, the learner and syncer options (diloco.VTime,
-- diloco.Syncer and diloco.Learner take the same two tables), the quorum a recipe's
-- function gives, the chaos schedule.  Used by `sim` (diloco.sim), `run` with several
-- islands and `syncer` (diloco.cluster), and `learner` (diloco.learner), so a learner
-- process and the syncer it joins agree by construction.
local diloco = require "diloco"
local train = require "diloco.train"
local M = {}

local fail, fail_code, plain = train.fail, train.fail_code, train.plain

-- Every recipe hook runs through here (diloco.train.call_hook).
M.call_hook = train.call_hook

-- A hook of a driver whose loop stops the run in order on a signal (run's supervisor, a
-- learner): one that a signal interrupted returns nil, and the loop, seeing the signal,
-- stops as it would between two steps.
function M.hook(name, fn, ...)
  local ok, res = pcall(train.call_hook, name, fn, ...)
  if ok then return res end
  if type(res) == "table" and res.diloco_stop then return nil end
  error(res, 0)
end

local function is_embedding(name, patterns)
  for _, p in ipairs(patterns or {}) do
    if name:find(p) then return true end
  end
  return false
end

-- The fragment plan of the recipe over params (raises exit 2 naming sync.plan).
function M.plan(r, params, ntensors)
  local sy = r.sync
  local ferr = diloco.recipe.check_fragments(r, ntensors)
  if ferr then fail_code(2, "%s", ferr) end
  local okp, plan = pcall(diloco.Plan, params, { kind = sy.plan, fragments = sy.preset == "dp" and 1 or sy.fragments,
    split_rows = sy.split_rows })
  if not okp then fail_code(2, "sync.plan / sync.fragments: %s", plain(plan)) end
  return plan
end

-- The quorum the syncer gets (0 = every live learner); a function of the live count
-- is called, and checked.
function M.quorum_value(r, live, now)
  local q = r.sync.quorum
  if q == "all" then return 0 end
  if type(q) == "function" then
    local k = M.call_hook("sync.quorum", q, live, { live = live, learners = r.islands.count, virtual_s = now })
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

-- The run of the recipe for diloco.VTime, diloco.Syncer, diloco.Learner and the
-- diloco.machine ones, for a model whose parameter list is plist: the learner and syncer
-- tables of what each process chooses alone (heartbeat: seconds between a learner's
-- heartbeats; timeout: the syncer's own silence timeout, 0 when the transport's liveness
-- is used; which tensors merge by weighted mean; the dp history), and run_json, the
-- run's fields as text under the recipe's own names, which C reads with its one reader of
-- a run (core/run.c, dlc_run_parse, client.h's run): sync.codec stays sync.codec from the
-- recipe to the wire.
function M.sync_options(r, plist, heartbeat, timeout)
  local sy = r.sync
  local dp = sy.preset == "dp"
  local emb = {}
  for i, p in ipairs(plist) do emb[i] = is_embedding(p[1], sy.embeddings) end
  local grace = sy.grace_s and "fixed" or sy.grace
  local schedule = type(sy.schedule) == "function"
  local run = {
    sync = { preset = sy.preset, H = schedule and 0 or sy.H, fragments = sy.fragments, tau = sy.tau,
      alpha = sy.alpha, blocking = sy.blocking, quorum = dp and 0 or M.quorum_value(r, r.islands.count, 0),
      grace = grace, grace_s = sy.grace_s, grace_gamma = sy.grace_gamma, weighting = sy.weighting,
      merge = sy.merge, ring = sy.ring, codec = sy.codec, codec_down = sy.codec_down, block = sy.block,
      error_feedback = sy.error_feedback, ema = sy.ema },
    outer = { lr = r.outer.lr, momentum = r.outer.momentum, nesterov = r.outer.kind == "nesterov" } }
  local learner = { heartbeat = heartbeat }
  local syncer = { embedding = emb, timeout = timeout, dp_history = sy.dp_history }
  return learner, syncer, diloco.json_encode(run)
end

-- The chaos schedule of the recipe as a diloco.Chaos (nil: no faults).  horizon: the
-- seconds the seeded policies cover.
function M.chaos(r, horizon)
  local c = r.chaos
  if c == nil or (#(c.events or {}) == 0 and not c.random) then return nil end
  local ch = diloco.Chaos(r.islands.count)
  for _, e in ipairs(c.events or {}) do -- (sim's: run executes its scripted events itself, cluster.lua)
    ch:add { at = e.at, kind = e.kind, learner = e.learner, duration = e.duration or math.huge,
      factor = e.kind == "slow" and e.factor or nil, bandwidth = e.kind == "link" and e.bandwidth or nil,
      latency = e.kind == "link" and e.latency or nil, shard = e.learner == nil and e.shard or nil,
      role = e.learner == nil and e.role ~= "primary" and e.role or nil }
  end
  if c.random then
    for _, l in ipairs(c.random.learners) do
      ch:poisson { learner = l, mtbf = c.random.mtbf, down = c.random.down,
        exponential_down = c.random.exponential_down or false, horizon = horizon, seed = c.seed }
    end
  end
  return ch
end

-- A sync.schedule function's fragments due after a learner's step, checked.
function M.scheduled(r, id, step, P)
  local due = M.call_hook("sync.schedule", r.sync.schedule, id, step, P)
  if due ~= nil and type(due) ~= "table" then
    fail("sync.schedule(%d, %d) returned %s (a %s): expected a list of fragments in [1, %d] ({} or nil: none "
      .. "after this step)", id, step, diloco.json_encode(due), type(due), P)
  end
  for _, p in ipairs(due or {}) do
    if math.type(p) ~= "integer" or p < 1 or p > P then
      fail("sync.schedule(%d, %d) returned fragment %s: expected integers in [1, %d]", id, step, tostring(p), P)
    end
  end
  return due or {}
end

-- The merge record of a syncer merge event, as `sim` and `run` write it (virtual_s or
-- wall_s is the caller's).
function M.merge_info(mi)
  local contributors = {}
  for i, c in ipairs(mi.contributors) do
    contributors[i] = { learner = c.learner, weight = c.weight, staleness = c.staleness, steps = c.steps,
      tokens = c.tokens, base_version = c.base_version, incarnation = c.incarnation }
  end
  return { fragment = mi.fragment, version = mi.version, contributors = contributors, grace = mi.grace,
    waited = mi.waited, all_sent = mi.all_sent, flushed = mi.flushed or nil, live = mi.live, quorum = mi.quorum,
    bytes_in = mi.bytes_in, bytes_out = mi.bytes_out, useful_tokens = mi.useful_tokens, replica = mi.replica or nil }
end

return M

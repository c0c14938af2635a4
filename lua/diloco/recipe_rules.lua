-- diloco.recipe_rules: the rules between a recipe's fields that no one field's spec can see
-- (the quorum against the islands, the overlap against H, the heartbeat against the
-- timeout, the model against the data and the memory it needs, ...).  diloco.recipe.validate
-- calls M.check once every field is valid on its own; what it shares with the rest of the
-- recipe is recipe.lua's own (diloco.recipe._check), bound at the first call.
local M = {}

local describe, check_model_data, IMAGE_PIXELS, parse_duration, model_options
local function bind()
  if describe then return end
  local recipe = require "diloco.recipe"
  local H = recipe._check
  describe, check_model_data, IMAGE_PIXELS = H.describe, H.check_model_data, H.IMAGE_PIXELS
  parse_duration, model_options = recipe.parse_duration, recipe.model_options
end

local function check_sync(r, errs)
  local sy, isl = r.sync, r.islands
  if math.type(sy.quorum) == "float" then sy.quorum = math.tointeger(sy.quorum) end
  if type(sy.quorum) == "number" and sy.quorum > isl.count then
    errs[#errs + 1] = string.format("sync.quorum = %d but islands.count = %d: quorum must be <= the number of "
      .. "learners", sy.quorum, isl.count)
  end
  if sy.H == 0 then -- (core/run.c allows 0: a host's own schedule; a recipe's is sync.schedule)
    errs[#errs + 1] = "sync.H = 0: expected an integer >= 1 in a recipe (H = 0 is a host's own schedule, calling "
      .. "contribute itself; a recipe gives its schedule as sync.schedule, which replaces H)"
  elseif sy.preset ~= "dp" and sy.tau >= sy.H then
    errs[#errs + 1] = string.format("sync.tau = %d: the overlap must be below sync.H = %d (a fragment is applied "
      .. "before it is due again)", sy.tau, sy.H)
  end
  if sy.preset == "dp" and sy.fragments ~= 1 then
    errs[#errs + 1] = string.format("sync.fragments = %d: expected 1 with sync.preset = \"dp\" (data parallel "
      .. "exchanges the whole gradient every step)", sy.fragments)
  end
  if sy.preset == "dp" then
    for i, e in ipairs(isl.list or {}) do
      if e.ranks then
        errs[#errs + 1] = string.format("islands[%d].ranks = %d: islands of several ranks run the DiLoCo presets "
          .. "(diloco, streaming, decoupled), not sync.preset = \"dp\" (expected ranks = 1)", i, e.ranks)
        break
      end
    end
  end
  sy.grace_s = nil
  if sy.grace ~= "adaptive" and sy.grace ~= "off" then sy.grace_s = parse_duration(sy.grace) + 0.0 end
end

-- Every rule between fields, into errs.
function M.check(r, errs)
  bind()
  check_sync(r, errs)
  local S = r.islands and r.islands.syncers
  if S and (r.sync.preset == "dp" or S > (r.sync.fragments or 1)) then -- (each shard owns a fragment: docs/shards.md)
    errs[#errs + 1] = string.format("islands.syncers = %d: %s", S, r.sync.preset == "dp"
      and "data parallel has one syncer (expected 1)"
      or string.format("expected at most sync.fragments = %d shards (each owns one fragment at least)", r.sync.fragments))
  end
  local standbys = r.islands and r.islands.standbys
  if standbys and r.sync.preset == "dp" then
    errs[#errs + 1] = "islands.standbys = true: data parallel's syncer takes no standby (expected false)"
  end
  for i, e in ipairs(r.chaos and r.chaos.events or {}) do
    if e.shard and e.shard > (S or 1) then
      errs[#errs + 1] = string.format("chaos[%d].shard = %d: expected a shard in [1, %d] (islands.syncers = %d)", i,
        e.shard, S or 1, S or 1)
    end
    if e.role and e.role ~= "primary" and not standbys then
      errs[#errs + 1] = string.format("chaos[%d].role = %q: the syncer has no standby (expected islands.standbys = true)",
        i, e.role)
    end
  end
  local rt = r.runtime
  local hb, to = rt and parse_duration(rt.heartbeat), rt and parse_duration(rt.timeout)
  if hb and to and hb >= to then
    errs[#errs + 1] = string.format("runtime.heartbeat = %s >= runtime.timeout = %s: expected heartbeat < timeout "
      .. "(a live learner would be lost between two heartbeats)", tostring(rt.heartbeat), tostring(rt.timeout))
  end
  local d = r.data
  if d.kind == "text" and not d.path then
    errs[#errs + 1] = "data.path: missing (data.kind = \"text\" needs a file or directory)"
  end
  if d.kind == "images" and not (d.images and d.labels) then
    errs[#errs + 1] = "data.images / data.labels: missing (data.kind = \"images\" needs both IDX files)"
  end
  if d.kind == "fashion" and d.classes ~= 10 then
    errs[#errs + 1] = string.format("data.classes = %d: Fashion-MNIST has 10 classes", d.classes)
  end
  local inner = r.inner
  if inner.min_lr > inner.lr then
    errs[#errs + 1] = string.format("inner.min_lr = %s is above inner.lr = %s: the schedule decays from lr to min_lr",
      describe(inner.min_lr), describe(inner.lr))
  end
  if inner.kind == "nesterov" and inner.momentum <= 0 then
    errs[#errs + 1] = string.format("inner.momentum = %s: nesterov needs momentum > 0 (or inner.kind = \"sgd\")",
      describe(inner.momentum))
  end
  if type(r.model) == "table" then
    local o, e = model_options(r.model)
    if not o then
      errs[#errs + 1] = e
    else
      local before = #errs
      check_model_data(r.model.arch, o, d, IMAGE_PIXELS[d.kind], errs)
      if #errs == before then
        local est = require("diloco.estimate")
        local okm, merr = est.check(est.training(r.model.arch, o, d, inner.kind))
        if not okm then errs[#errs + 1] = "memory: " .. merr end
      end
    end
  end
  if r.inner.warmup == nil then r.inner.warmup = math.min(100, r.steps // 10) end
  if r.inner.warmup >= r.steps and r.inner.warmup > 0 and r.inner.schedule ~= "constant" then
    errs[#errs + 1] = string.format("inner.warmup = %d: must be below steps = %d", r.inner.warmup, r.steps)
  end
end

return M

-- diloco.island: one island, as every driver hosts it.  A driver (a one-island run in
-- lua/diloco/train.lua, each island of a sim in sim.lua, a learner process in
-- learner.lua and its MPI ranks in ranks.lua, each learner of sim --replay in replay.lua)
-- makes its island here and configures it with its own fields; what an island does is
-- written once, here:
--
--   local I = island.new(r, { id = 2, who = "island 2", total = 1000 })
--   I:build()                                  -- model, parameters, inner optimizer
--   assert(I:open_data(batch, shard, count))   -- its shard of the data
--   local info = I:inner_step()                -- batch, loss, backward, clip, update
--   I:report(I.step, info)                     -- the step's metrics line, hooks.on_step
--   I:save(I.step)                             -- a checkpoint into its run directory
--
-- the learning rate at a step (M.lr_at, with hooks.lr), the two halves of a data-parallel
-- step (M.dp_gradient, M.dp_apply), the inner step (M.inner_step), the evaluation on the
-- fixed held-out subset (M.evaluate, M.final_eval), the island's checkpoint (its
-- parameters, optimizer state, data cursor and counters: Island:save, Island:restore),
-- the model file every driver writes (M.save_model), and why a driver's loop stops
-- (M.stop_reason).  scripts/check_layers (rules 7 and 9) keeps these here.
--
-- The island's fields, which a driver may read and set: recipe, id (nil for a one-island
-- run), who (the prefix of its errors: "island 2"), model, plist, params, opt, loaders,
-- step (the schedule's step its next inner step runs at), total (the schedule's length,
-- default steps), tokens, train_time, tok_window, t_window, loss_ema, t_start, log_every,
-- last_step (a step also logged when reached; nil: none), rate (false: its metrics lines
-- carry no tokens_per_s, as a sim's islands on virtual time), metrics, rd, bar; and link
-- with fragments: the island's way to its syncer, one method set whatever binding drives
-- it (link.contribute(p), link.step_done(tokens, seconds): an adapter over diloco.VTime,
-- diloco.Learner or diloco.machine.Learner), and the run's number of fragments.
local diloco = require "diloco"
local errors = require "diloco.errors"
local M = {}

local plain, fail, fail_code, call_hook = errors.plain, errors.fail, errors.fail_code, errors.call_hook

-- ---- the model ----

-- Model options without `arch`, as given in the recipe (saved as JSON metadata so
-- `diloco-lua sample` can rebuild the model from model.safetensors alone).
local function model_options(spec)
  local o = {}
  for k, v in pairs(spec) do
    if k ~= "arch" then o[k] = v end
  end
  return o
end

local function is_module(m)
  return type(m) == "table" and type(m.parameters) == "function" and type(m.loss) == "function" and
    type(m.train) == "function" and type(m.eval) == "function"
end

-- The model of a recipe's model section (a table, or a function returning a module).
function M.build_model(spec, seed)
  local nn = diloco.nn
  if type(spec) == "function" then
    local ok, m = pcall(spec)
    if not ok then fail_code(2, "model: the model function failed: %s", plain(m)) end
    if not is_module(m) then
      fail_code(2, "model: the model function returned %s: expected a diloco.nn module (with :parameters(), " ..
        ":loss(), :train() and :eval())", type(m) == "table" and "a table that is not a module" or type(m))
    end
    return m
  end
  local o = model_options(spec)
  if o.seed == nil then o.seed = seed end
  local ctor = ({ gpt = nn.GPT, vit = nn.ViT, mlp = nn.MLPClassifier })[spec.arch]
  local ok, m = pcall(ctor, o)
  if not ok then fail_code(2, "model: %s", plain(m)) end
  return m
end

-- The island's data: the recipe's, at `batch` rows a step (the island's batch, times its
-- ranks), shard `shard` of `count`, seeded by the run.  pcall's results: true and the
-- loaders, or false and the error (each driver reports it its way).
function M.open_data(r, batch, shard, count)
  local d = r.data
  if batch and batch ~= d.batch then
    d = {}
    for k, v in pairs(r.data) do d[k] = v end
    d.batch = batch
  end
  return pcall(diloco.data.open, d, shard or 1, count or 1, r.seed)
end

-- ---- evaluation ----

-- The fixed evaluation subset: the 1-based first items (text: windows of a sequential
-- pass, images: examples in order) of n batches of `batch` rows over `items` items.
-- n >= ceil(items / batch): every item once, batches at 1, batch + 1, ... (the last may be
-- short).  Fewer: starts (i * items) // n + 1 for i = 0 .. n - 1, evenly spread, full
-- and disjoint (items / n > batch), the first at 1, the last in the last n-th.  Depends
-- only on the three numbers, never on a seed or a run.
function M.eval_starts(items, batch, n)
  local starts = {}
  if n * batch >= items then
    for s = 1, items, batch do starts[#starts + 1] = s end
  else
    for i = 0, n - 1 do starts[i + 1] = i * items // n + 1 end
  end
  return starts
end

-- Iterator over the x, y of that subset of loaders.eval (loader:batch_at: never
-- shuffled, the cursor untouched), for n = eval.batches:
--   for x, y in island.eval_batches(loaders, 32) do ... end
function M.eval_batches(loaders, n)
  local l = loaders.eval
  local starts = M.eval_starts(l.kind == "text" and l.windows or l.size, l.batch, n)
  local i = 0
  return function()
    i = i + 1
    if starts[i] then return l:batch_at(starts[i]) end
  end
end

-- Mean loss (and accuracy for classifiers) over the fixed subset of `batches` held-out
-- batches (M.eval_batches), weighted by rows: every window / example counts once.
function M.evaluate(model, loaders, batches)
  model:eval()
  local total, correct, seen = 0.0, 0, 0
  diloco.no_grad(function()
    for x, y in M.eval_batches(loaders, batches) do
      local _, ce, logits = model:loss(x, y)
      local rows = x.shape[1]
      total = total + ce:item() * rows
      seen = seen + rows
      if loaders.kind == "images" then
        local pred = (logits or model:forward(x)):argmax(-1)
        local p, l = pred:tolist(), y:tolist()
        for i = 1, #p do
          if p[i] == l[i] then correct = correct + 1 end
        end
      end
    end
  end)
  model:train()
  local r = { loss = total / seen, rows = seen }
  if loaders.kind == "images" then r.accuracy = correct / seen end
  return r
end

-- Held-out batches in the whole eval split (every window / example once).
function M.eval_batches_all(loaders)
  if loaders.eval_batches_all then return loaders.eval_batches_all end
  local l = loaders.eval
  return math.ceil((l.kind == "text" and l.windows or l.size) / l.batch)
end

-- The end of a run's evaluation: the model on the eval.batches subset the curve used
-- (images: the whole split, as before), and with eval.final_all on the whole eval split
-- too (nil when it is off or the subset already was the whole split).  Returns
-- final, all; the final eval event's fields (loss_all, accuracy_all, rows_all) into ev.
function M.final_eval(model, loaders, r, ev)
  local all_n = M.eval_batches_all(loaders)
  local n = loaders.kind == "images" and all_n or r.eval.batches
  local final = M.evaluate(model, loaders, n)
  local all
  if r.eval.final_all and n < all_n then all = M.evaluate(model, loaders, all_n) end
  local whole = all or (n >= all_n and final) or nil
  if ev and whole then
    ev.loss_all, ev.accuracy_all, ev.rows_all = whole.loss, whole.accuracy, whole.rows
  end
  return final, whole
end

-- ---- the step ----

-- The inner learning rate of the step about to run, at schedule step `step` (0-based) of
-- `total` (default the recipe's steps): the schedule's (inner.lr without one), or what
-- hooks.lr(step + 1, that) returns (checked).  The one computation of it: every driver
-- calls this, through the steps below.
function M.lr_at(r, step, total)
  local lr = r.inner.schedule and diloco.optim.lr_at(r.inner, step, total or r.steps) or r.inner.lr
  if r.hooks.lr then
    local v = call_hook("lr", r.hooks.lr, step + 1, lr)
    if math.type(v) == nil or v ~= v or v < 0 or v > 3.4e38 then
      fail("hooks.lr(%d) returned %s%s: expected a finite learning rate >= 0 (a number)", step + 1,
        type(v) == "string" and string.format("%q", v) or tostring(v), type(v) == "string" and " (a string)" or "")
    end
    lr = v
  end
  return lr
end

-- The two halves of a data-parallel step, written once for every driver (a learner
-- process and its catch-up replay, each island of a sim, sim --replay): the gradient of a
-- batch here, the optimizer step once the syncer's average is back in the gradients.
-- dp_gradient: the learning rate of schedule step `step` (of `total`), forward and
-- backward of the next batch; returns the loss and that rate.
function M.dp_gradient(r, model, params, loaders, step, total)
  local lr = M.lr_at(r, step, total)
  local x, y = loaders.train:next()
  params:zero_grad()
  local loss = model:loss(x, y)
  loss:backward()
  local lv = loss:item()
  loss:free()
  return lv, lr
end

-- dp_apply: the averaged gradient clipped (inner.clip) or its norm measured, check(norm)
-- when given (it may raise: the step is then not applied), then the optimizer step at
-- rate lr.  Returns the norm.
function M.dp_apply(r, params, opt, lr, check)
  local gnorm = r.inner.clip > 0 and params:clip_grad_norm(r.inner.clip) or params:grad_norm()
  if check then check(gnorm) end
  opt:step(lr)
  return gnorm
end

-- One inner step: batch -> loss -> backward -> clip -> optimizer step.  Returns
-- {loss, aux, grad_norm, lr}.  A diverged step raises before the update (a table with
-- `nonfinite`, the one error type otherwise), so the parameters stay those of the last
-- good step.  I: an island (its fields above); an island of several MPI ranks also sets
-- rows (this rank's rows of the island's batch), reduce_loss, grad_seed and reduce.
function M.inner_step(I)
  local r, loaders = I.recipe, I.loaders
  local t0 = diloco.clock()
  local lr = M.lr_at(I.recipe, I.step, I.total)
  local x, y = loaders.train:next()
  if I.rows then x, y = x:slice(1, I.rows[1], I.rows[2]), y:slice(1, I.rows[1], I.rows[2]) end
  I.params:zero_grad()
  local loss, ce = I.model:loss(x, y)
  local lv = loss:item()
  local aux = ce and ce ~= loss and lv - ce:item() or nil -- auxiliary losses (MoE balance)
  -- an island of several ranks (learner.lua): this rank's rows of the island's batch
  -- (I.rows); the loss averaged over the ranks here, the gradients after the backward
  -- pass (I.reduce), so every rank checks, clips and steps on the same means
  if I.reduce_loss then lv = I.reduce_loss(lv) end
  if I.grad_seed then
    -- an island of R ranks: the backward pass seeded with 1/R, so the sum over the
    -- ranks (I.reduce) is the mean gradient without another pass over the arena
    if type(I.grad_seed) == "number" then I.grad_seed = diloco.full(loss.shape, I.grad_seed) end
    loss:backward(I.grad_seed)
  else
    loss:backward()
  end
  loss:free()
  if I.reduce then I.reduce() end
  local gnorm = r.inner.clip > 0 and I.params:clip_grad_norm(r.inner.clip) or I.params:grad_norm()
  if lv ~= lv or math.abs(lv) == math.huge or gnorm ~= gnorm or gnorm == math.huge then
    -- the one error type (fail), carrying the values: a learner rolls back on it instead
    error({ diloco_error = string.format("%sstep %d: training diverged (loss %s, gradient norm %s), the update was "
      .. "not applied; lower inner.lr (%g) or check the data", I.who and I.who .. ", " or "", I.step + 1,
      tostring(lv), tostring(gnorm), r.inner.lr), code = 1, nonfinite = { loss = lv, grad_norm = gnorm } }, 0)
  end
  I.opt:step(lr)
  I.step = I.step + 1
  I.tokens = I.tokens + loaders.tokens_per_batch
  I.tok_window = I.tok_window + loaders.tokens_per_batch
  I.train_time = I.train_time + (diloco.clock() - t0)
  I.loss_ema = I.loss_ema and (0.9 * I.loss_ema + 0.1 * lv) or lv
  return { loss = lv, aux = aux, grad_norm = gnorm, lr = lr }
end

-- Why a driver's loop must stop now: nil, or the name of the signal that came (kept in
-- ctx.signal and ctx.signo, the first one).  Every driver (a run, sim, a learner process,
-- the syncer side of a run) asks here; ctx is an island or a driver's context.
function M.stop_reason(ctx)
  local name, signo = diloco.signals.pending()
  if name and not ctx.signal then
    ctx.signal, ctx.signo = name, signo
  end
  return ctx.signal
end

-- ---- files ----

-- The metadata every model file states, whoever wrote it (a run's model.safetensors, a
-- checkpoint's model, a syncer's global model): the recipe's name and effective JSON,
-- the model section (a table: `diloco-lua sample` rebuilds the model from it) and the
-- step; extra: more keys.
local function model_meta(r, step, recipe_json, extra)
  local meta = { ["diloco.recipe"] = r.name or "", ["diloco.step"] = tostring(step),
    ["diloco.recipe_json"] = recipe_json }
  if type(r.model) == "table" then meta["diloco.model"] = diloco.json_encode(r.model, { sort_keys = true }) end
  for k, v in pairs(extra or {}) do meta[k] = v end
  return meta
end

-- Writes the parameters plist (a model's parameter list) to path as a model file of
-- recipe r at `step`: diloco.save_safetensors's results.  The one writer of every
-- driver's model.safetensors.
function M.save_model(path, plist, r, step, recipe_json, extra)
  return diloco.save_safetensors(path, plist, model_meta(r, step, recipe_json, extra))
end

-- ---- the island ----

local Island = {}
Island.__index = Island
M.Island = Island

-- A new island of validated recipe r; fields: the driver's (id, who, total, island, ...),
-- kept on it.  Its model comes with I:build(), its data with I:open_data().
function M.new(r, fields)
  local I = fields or {}
  I.recipe = r
  I.t_start = I.t_start or diloco.clock()
  I.step, I.tokens = I.step or 0, I.tokens or 0
  I.train_time, I.tok_window = I.train_time or 0.0, I.tok_window or 0
  I.log_every = I.log_every or r.log.every or math.max(1, r.steps // 20)
  return setmetatable(I, Island)
end

-- The model (in training mode), its parameter list and Params, and the inner optimizer.
function Island:build()
  local r = self.recipe
  self.model = M.build_model(r.model, r.seed)
  self.model:train()
  self.plist = self.model:parameters()
  self.params = diloco.Params(self.plist)
  self.opt = diloco.optim.build(self.params, r.inner)
  return self
end

-- A fresh inner optimizer (a restarted process without a checkpoint, a rollback).
function Island:fresh_optimizer()
  self.opt = diloco.optim.build(self.params, self.recipe.inner)
end

-- Its data (M.open_data): true, and the loaders in self.loaders, or false and the error.
function Island:open_data(batch, shard, count)
  local ok, loaders = M.open_data(self.recipe, batch, shard, count)
  if ok then self.loaders = loaders end
  return ok, loaders
end

function Island:inner_step() return M.inner_step(self) end

-- The dp step's halves on this island, at its schedule step (self.step of self.total).
function Island:dp_gradient()
  return M.dp_gradient(self.recipe, self.model, self.params, self.loaders, self.step, self.total)
end
function Island:dp_apply(lr, check) return M.dp_apply(self.recipe, self.params, self.opt, lr, check) end

-- The fragments sync.schedule (a recipe's own schedule) makes due after schedule step
-- `step` (the island's step on the run's schedule, after the step it just took), each
-- sent through its link; nothing without one.  Returns how many.
function Island:contribute_scheduled(step)
  local r = self.recipe
  if type(r.sync.schedule) ~= "function" then return 0 end
  local due = require("diloco.islands").scheduled(r, self.id, step, self.fragments)
  for _, p in ipairs(due) do self.link.contribute(p) end
  return #due
end

-- The step that took the island to schedule step `step` reaches its syncer: its
-- scheduled contributions, then the step's end (tokens trained, seconds of compute).
-- Returns how many fragments the schedule sent.
function Island:step_done(step, tokens, seconds)
  local n = self:contribute_scheduled(step)
  self.link.step_done(tokens, seconds)
  return n
end

function Island:evaluate(batches) return M.evaluate(self.model, self.loaders, batches or self.recipe.eval.batches) end
function Island:final_eval(ev) return M.final_eval(self.model, self.loaders, self.recipe, ev) end

-- A line of its metrics; a failed write ends the run.
function Island:write(event, fields)
  local ok, err = self.metrics:write(event, fields)
  if not ok then fail("%s", err) end
end

-- A line for the user on stderr; say: on the progress display when there is one.
function Island:warn(fmt, ...)
  io.stderr:write("diloco-lua: ", string.format(fmt, ...), "\n")
  io.stderr:flush()
end
function Island:say(fmt, ...)
  if self.bar then self.bar:print(string.format(fmt, ...)) end
end

-- The step `step` just trained (info: inner_step's {loss, aux, grad_norm, lr}): its line
-- in the metrics every log_every steps and from last_step on (line: the driver's fields
-- beside the island's, or a function returning them, called only when the line is
-- due), then hooks.on_step (hook: the driver's fields of it).
function Island:report(step, info, line, hook)
  local r = self.recipe
  if step % self.log_every == 0 or (self.last_step and step >= self.last_step) then
    local now = diloco.clock()
    local f = { learner = self.id, step = step, loss = info.loss, aux_loss = info.aux, lr = info.lr,
      grad_norm = info.grad_norm, tokens = self.tokens, wall_s = now - self.t_start }
    if self.rate ~= false then
      f.tokens_per_s = self.tok_window / math.max(now - (self.t_window or self.t_start), 1e-9)
      self.t_window, self.tok_window = now, 0
    end
    if type(line) == "function" then line = line() end
    for k, v in pairs(line or {}) do f[k] = v end
    self:write("step", f)
  end
  if r.hooks.on_step then
    local h = { learner = self.id, step = step, loss = info.loss, lr = info.lr, grad_norm = info.grad_norm,
      tokens = self.tokens }
    for k, v in pairs(hook or {}) do h[k] = v end
    call_hook("on_step", r.hooks.on_step, h)
  end
end

-- The checkpoint's metadata at schedule step `step`: the model file's (M.save_model) and
-- the island's counters (tokens, optimizer steps), its data cursor, and self.state_meta
-- (a learner's id and run id).
function Island:checkpoint_meta(step)
  local extra = { ["diloco.format"] = "1", ["diloco.tokens"] = tostring(self.tokens),
    ["diloco.loader"] = diloco.json_encode(self.loaders.train:state()),
    ["diloco.optim_steps"] = tostring(self.opt:step_count()) }
  for k, v in pairs(self.state_meta or {}) do extra[k] = v end
  return model_meta(self.recipe, step, self.recipe_json, extra)
end

-- The model file beside a checkpoint of metadata meta (its model keys only).
function Island:save_model(path, meta)
  local keep = {}
  for _, k in ipairs { "diloco.model", "diloco.step", "diloco.recipe", "diloco.recipe_json", "diloco.learner",
    "diloco.run_id" } do keep[k] = meta[k] end
  return diloco.save_safetensors(path, self.plist, keep)
end

-- Whether a checkpoint is due at step `step`: every checkpoint.every steps, or
-- checkpoint.minutes after the last save (self.last_save).
function Island:checkpoint_due(step)
  local c = self.recipe.checkpoint
  return (c.every > 0 and step % c.every == 0) or
    ((c.minutes or 0) > 0 and diloco.clock() - (self.last_save or self.t_start) >= c.minutes * 60)
end

-- Saves the island's checkpoint of schedule step `step` (its parameters and optimizer
-- state, the metadata above) into its run directory (self.rd: rundir:save, the model
-- beside it), with a `checkpoint` line in its metrics.  A failed save is reported (the
-- previous checkpoint is kept) and recorded in self.save_error; returns the rundir's
-- result or nil, err.
function Island:save(step)
  local meta = self:checkpoint_meta(step)
  local t0 = diloco.clock()
  local res, err = self.rd:save(step, function(path)
    local all, state = table.move(self.plist, 1, #self.plist, 1, {}), self.opt:state()
    table.move(state, 1, #state, #all + 1, all)
    return diloco.save_safetensors(path, all, meta)
  end, function(path) return self:save_model(path, meta) end)
  self.last_save = diloco.clock()
  if res then
    self.checkpoint, self.checkpoint_step, self.save_error = res.path, step, nil
    self:write("checkpoint", { learner = self.id, step = step, path = res.path, seconds = diloco.clock() - t0,
      removed = #res.removed > 0 and res.removed or nil })
    return res
  end
  self.save_error = string.format("saving %sstep %d to %s: %s", self.id and ("learner " .. self.id .. ", ") or "",
    step, self.out, plain(err))
  self:write("checkpoint", { learner = self.id, step = step, error = self.save_error })
  self:warn("%s (the previous checkpoint%s is kept)", self.save_error,
    self.checkpoint and (" " .. self.checkpoint) or "")
  return nil, self.save_error
end

local function shape_text(shape) return "[" .. table.concat(shape, ", ") .. "]" end

-- Loads the checkpoint at path (written by Island:save) into the island: its optimizer
-- state and step count, data cursor and token count, and with o.model its parameters.
-- o.check(meta), when given, runs first and returns nil or why the file must not be
-- restored (it may raise).  Returns meta; or nil and why (the file unreadable, another
-- run's or learner's, a tensor missing or of another shape), the island untouched; a
-- data cursor that does not fit is the second result beside meta (the rest restored).
function Island:restore(path, o)
  o = o or {}
  local t, meta = diloco.load_safetensors(path)
  if not t then return nil, plain(meta) end
  if o.check then
    local why = o.check(meta)
    if why then return nil, why end
  end
  local loader
  if meta["diloco.loader"] then
    local jerr
    loader, jerr = diloco.json_decode(meta["diloco.loader"])
    if type(loader) ~= "table" then
      return nil, string.format("metadata diloco.loader is not a JSON object: %s", tostring(jerr))
    end
  end
  local lists = { { self.opt:state(), "optimizer" } }
  if o.model then table.insert(lists, 1, { self.plist, "parameter" }) end
  for _, l in ipairs(lists) do
    for _, p in ipairs(l[1]) do
      local src = t[p[1]]
      if not src then return nil, string.format("%s tensor '%s' is missing from the checkpoint", l[2], p[1]) end
      if shape_text(src.shape) ~= shape_text(p[2].shape) then
        return nil, string.format("%s tensor '%s' has shape %s, this model expects %s (a different model?)", l[2],
          p[1], shape_text(src.shape), shape_text(p[2].shape))
      end
    end
  end
  for _, l in ipairs(lists) do
    for _, p in ipairs(l[1]) do p[2]:copy(t[p[1]]) end
  end
  local n = math.tointeger(tonumber(meta["diloco.optim_steps"] or ""))
  if n then self.opt:set_step_count(n) end
  self.tokens = math.tointeger(tonumber(meta["diloco.tokens"] or "")) or 0
  if loader then
    local ok, err = pcall(self.loaders.train.set_state, self.loaders.train, loader)
    if not ok then return meta, "data cursor: " .. plain(err) end
  end
  return meta
end

return M

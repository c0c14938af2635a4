-- diloco.train: one learner training a validated recipe (islands.count = 1).
--
--   local r = assert(diloco.recipe.validate(diloco.recipe.load("recipes/charlm.lua")))
--   local summary = diloco.train.run(r, { metrics = "m.jsonl", out = "runs/charlm" })
--
-- Inner loop: batch -> loss -> backward -> clip -> AdamW step over one parameter
-- arena.  Evaluates every eval.every steps, writes JSON-lines metrics, checkpoints to
-- OUT/checkpoint.safetensors (parameters, optimizer state, data cursor) and the model
-- to OUT/model.safetensors.  Ctrl-C finishes the current step, saves, and returns.
local diloco = require "diloco"
local M = {}

-- A Lua error message without its "file.lua:12: " position prefix (the position of
-- our own loader code means nothing to the user).
local function plain(msg)
  return (tostring(msg):gsub("^[^%s:]+%.lua:%d+: ", ""))
end
M.plain = plain

local function fail(fmt, ...)
  error({ diloco_error = string.format(fmt, ...) }, 0)
end
M.fail = fail

-- Model options without `arch`, as given in the recipe (saved as JSON metadata so
-- `diloco-lua sample` can rebuild the model from model.safetensors alone).
local function model_options(spec)
  local o = {}
  for k, v in pairs(spec) do
    if k ~= "arch" then o[k] = v end
  end
  return o
end

function M.build_model(spec, seed)
  local nn = diloco.nn
  if type(spec) == "function" then
    local ok, m = pcall(spec)
    if not ok then fail("model: the model function failed: %s", plain(m)) end
    return m
  end
  local o = model_options(spec)
  if o.seed == nil then o.seed = seed end
  local ctor = ({ gpt = nn.GPT, vit = nn.ViT, mlp = nn.MLPClassifier })[spec.arch]
  local ok, m = pcall(ctor, o)
  if not ok then fail("model: %s", type(m) == "table" and tostring(m.diloco_error) or plain(m)) end
  return m
end

-- Mean loss (and accuracy for classifiers) over `batches` held-out batches.
function M.evaluate(model, loaders, batches)
  model:eval()
  loaders.eval:reset()
  local total, correct, seen = 0.0, 0, 0
  diloco.no_grad(function()
    for _ = 1, batches do
      local x, y = loaders.eval:next()
      local _, ce, logits = model:loss(x, y)
      total = total + ce:item()
      if loaders.kind == "images" then
        local pred = (logits or model:forward(x)):argmax(-1)
        local p, l = pred:tolist(), y:tolist()
        for i = 1, #p do
          if p[i] == l[i] then correct = correct + 1 end
        end
        seen = seen + #p
      end
    end
  end)
  model:train()
  local r = { loss = total / batches }
  if loaders.kind == "images" then r.accuracy = correct / seen end
  return r
end

local function save_all(ctx, step, tokens)
  local r, out = ctx.recipe, ctx.out
  local meta = {
    ["diloco.format"] = "1",
    ["diloco.recipe"] = r.name or "",
    ["diloco.step"] = tostring(step),
    ["diloco.tokens"] = tostring(tokens),
    ["diloco.loader"] = diloco.json_encode(ctx.loaders.train:state()),
  }
  if type(r.model) == "table" then
    meta["diloco.model"] = diloco.json_encode(r.model)
  end
  local tensors = {}
  for _, p in ipairs(ctx.plist) do tensors[#tensors + 1] = p end
  local ok, err = diloco.save_safetensors(out .. "/model.safetensors", tensors,
    { ["diloco.model"] = meta["diloco.model"], ["diloco.step"] = meta["diloco.step"],
      ["diloco.recipe"] = meta["diloco.recipe"] })
  if not ok then return nil, err end
  for _, s in ipairs(ctx.opt:state()) do tensors[#tensors + 1] = s end
  meta["diloco.optim_steps"] = tostring(ctx.opt:step_count())
  return diloco.save_safetensors(out .. "/checkpoint.safetensors", tensors, meta)
end

-- Loads a checkpoint written by save_all into the live parameters and optimizer.
-- Returns step, tokens.
local function resume(ctx, path)
  local t, meta = diloco.load_safetensors(path)
  if not t then fail("--resume %s", meta) end
  local function copy_into(list, what)
    for _, p in ipairs(list) do
      local name, dst = p[1], p[2]
      local src = t[name]
      if not src then fail("--resume %s: %s tensor '%s' is missing from the checkpoint", path, what, name) end
      if src.numel ~= dst.numel then
        fail("--resume %s: tensor '%s' has %d elements, this model expects %d (a different model?)", path, name,
          src.numel, dst.numel)
      end
      dst:copy(src)
    end
  end
  copy_into(ctx.plist, "parameter")
  copy_into(ctx.opt:state(), "optimizer")
  local step = math.tointeger(tonumber(meta["diloco.step"] or ""))
  if not step then fail("--resume %s: metadata diloco.step is missing (not a diloco checkpoint?)", path) end
  ctx.opt:set_step_count(math.tointeger(tonumber(meta["diloco.optim_steps"] or "")) or step)
  if meta["diloco.loader"] then
    local state, jerr = diloco.json_decode(meta["diloco.loader"])
    if type(state) ~= "table" then fail("--resume %s: metadata diloco.loader is not JSON: %s", path, tostring(jerr)) end
    local oks, serr = pcall(ctx.loaders.train.set_state, ctx.loaders.train, state)
    if not oks then fail("--resume %s: data cursor: %s", path, tostring(serr)) end
  end
  return step, math.tointeger(tonumber(meta["diloco.tokens"] or "")) or 0
end

-- Trains recipe r (validated).  opts: metrics (path), out (dir), resume (path),
-- quiet (no progress output), progress_out (file).  Returns the summary table and
-- whether the run was interrupted.
function M.run(r, opts)
  opts = opts or {}
  local t_start = diloco.clock()
  if r.threads then diloco.set_num_threads(r.threads) end
  diloco.seed(r.seed)
  local out = opts.out or r.out or ("runs/" .. (r.name or "run"))
  local ok, err = diloco.mkdir_p(out)
  if not ok then fail("--out %s: %s", out, err) end

  local model = M.build_model(r.model, r.seed)
  model:train()
  local plist = model:parameters()
  local params = diloco.Params(plist)
  local opt = diloco.optim.build(params, r.inner)
  local okd, loaders = pcall(diloco.data.open, r.data, 1, 1, r.seed)
  if not okd then fail("data: %s", plain(loaders)) end
  local metrics, merr = diloco.metrics.open(opts.metrics)
  if not metrics then fail("%s", merr) end

  local ctx = { recipe = r, out = out, plist = plist, params = params, opt = opt, loaders = loaders }
  local step, tokens = 0, 0
  if opts.resume then step, tokens = resume(ctx, opts.resume) end
  if step >= r.steps and opts.resume then
    fail("--resume %s: the checkpoint is at step %d, the recipe trains %d steps: nothing to do (raise steps)",
      opts.resume, step, r.steps)
  end

  local unit = loaders.kind == "text" and "tok" or "img"
  local log_every = r.log.every or math.max(1, r.steps // 20)
  local bar = not opts.quiet and diloco.progress.new { total = r.steps, every = log_every, unit = unit,
    out = opts.progress_out } or nil
  local hooks = r.hooks
  diloco.catch_sigint()

  local n_params = params:numel()
  if bar then
    bar:print(string.format("%s: %s parameters, %d steps of %d %s%s", r.name or "run",
      diloco.progress.human(n_params), r.steps, loaders.tokens_per_batch, unit == "tok" and "tokens" or "images",
      opts.resume and string.format(", resuming at step %d", step) or ""))
  end

  local interrupted, last_eval = false, nil
  local train_time, t_window, tok_window, loss_ema = 0.0, diloco.clock(), 0, nil
  local first_step = step
  -- The loop runs protected so that a failure (NaN loss, a hook error, a failed
  -- checkpoint) still ends the metrics file with a summary naming the error.
  local ok_loop, loop_err = pcall(function()
    while step < r.steps do
      if diloco.sigint_pending() then
        interrupted = true
        break
      end
      local t0 = diloco.clock()
      local lr = r.inner.schedule and diloco.optim.lr_at(r.inner, step, r.steps)
      if hooks.lr then
        local v = hooks.lr(step + 1, lr)
        if type(v) ~= "number" or v < 0 or v ~= v then
          fail("hooks.lr(%d) returned %s: expected a learning rate >= 0", step + 1, tostring(v))
        end
        lr = v
      end
      local x, y = loaders.train:next()
      params:zero_grad()
      local loss, ce = model:loss(x, y)
      loss:backward()
      local gnorm = r.inner.clip > 0 and params:clip_grad_norm(r.inner.clip) or params:grad_norm()
      local lv = loss:item()
      local aux = ce and ce ~= loss and lv - ce:item() or nil -- auxiliary losses (MoE balance)
      loss:free()
      -- checked before the update, so the parameters stay those of the last good step
      if lv ~= lv or math.abs(lv) == math.huge or gnorm ~= gnorm or gnorm == math.huge then
        fail("step %d: training diverged (loss %s, gradient norm %s), the update was not applied; "
          .. "lower inner.lr (%g) or check the data", step + 1, tostring(lv), tostring(gnorm), r.inner.lr)
      end
      opt:step(lr)
      step = step + 1
      tokens = tokens + loaders.tokens_per_batch
      tok_window = tok_window + loaders.tokens_per_batch
      train_time = train_time + (diloco.clock() - t0)
      loss_ema = loss_ema and (0.9 * loss_ema + 0.1 * lv) or lv
      local rate = tokens > 0 and (step - first_step) * loaders.tokens_per_batch / math.max(train_time, 1e-9) or 0

      if step % log_every == 0 or step == r.steps then
        local now = diloco.clock()
        metrics:write("step", { step = step, loss = lv, aux_loss = aux, lr = lr, grad_norm = gnorm, tokens = tokens,
          tokens_per_s = tok_window / math.max(now - t_window, 1e-9), wall_s = now - t_start })
        t_window, tok_window = now, 0
      end
      if r.eval.every > 0 and step % r.eval.every == 0 and step < r.steps then
        last_eval = M.evaluate(model, loaders, r.eval.batches)
        last_eval.step = step
        metrics:write("eval", { step = step, loss = last_eval.loss, accuracy = last_eval.accuracy, tokens = tokens,
          wall_s = diloco.clock() - t_start })
        if hooks.on_eval then hooks.on_eval(last_eval) end
      end
      if r.checkpoint.every > 0 and step % r.checkpoint.every == 0 then
        local okc, cerr = save_all(ctx, step, tokens)
        if not okc then fail("checkpoint at step %d: %s", step, cerr) end
      end
      if bar then
        bar:update({ step = step, loss = loss_ema, rate = rate,
          eta = (r.steps - step) * (train_time / math.max(step - first_step, 1)),
          eval_loss = last_eval and last_eval.loss })
      end
      if hooks.on_step then hooks.on_step { step = step, loss = lv, lr = lr, grad_norm = gnorm, tokens = tokens } end
    end
  end)
  if not ok_loop then
    if bar then bar:finish() end
    local msg = type(loop_err) == "table" and loop_err.diloco_error or plain(loop_err)
    metrics:write("summary", { preset = "single", learners = 1, steps = step, tokens = tokens,
      wall_s = diloco.clock() - t_start, interrupted = false, error = tostring(msg), recipe = r.name, out = out })
    metrics:close()
    error(loop_err, 0)
  end
  if bar then bar:finish() end

  local final_batches = loaders.kind == "images" and loaders.eval_batches_all or r.eval.batches
  local final = M.evaluate(model, loaders, final_batches)
  metrics:write("eval", { step = step, loss = final.loss, accuracy = final.accuracy, tokens = tokens,
    wall_s = diloco.clock() - t_start, final = true })
  local oks, serr = save_all(ctx, step, tokens)
  if not oks then fail("saving to %s: %s", out, serr) end

  local summary = {
    preset = "single", learners = 1, steps = step, tokens = tokens,
    final_eval_loss = final.loss, final_eval_accuracy = final.accuracy,
    goodput = 1.0, uptime = 1.0, bytes_up = 0, bytes_down = 0,
    wall_s = diloco.clock() - t_start, train_s = train_time,
    tokens_per_s = (step - first_step) * loaders.tokens_per_batch / math.max(train_time, 1e-9),
    params = n_params, interrupted = interrupted, recipe = r.name, out = out,
    gemm = diloco.gemm_backend(), threads = diloco.num_threads(),
  }
  metrics:write("summary", summary)
  metrics:close()
  if bar then
    bar:print(string.format("%s after %d steps: eval loss %.4f%s, %s %s/s; saved %s/model.safetensors",
      interrupted and "interrupted" or "done", step, final.loss,
      final.accuracy and string.format(", accuracy %.2f%%", 100 * final.accuracy) or "",
      diloco.progress.human(summary.tokens_per_s), unit, out))
  end
  return summary, interrupted
end

return M

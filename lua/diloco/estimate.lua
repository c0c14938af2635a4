-- diloco.estimate: what a model and a training step will allocate, from the options
-- alone, before anything is allocated (so a recipe with model.layers = 1e9 or
-- data.batch = 1e6, or a file whose metadata says so, is refused with the estimate
-- instead of growing until the machine swaps).
--
--   local o = diloco.nn.model_options("gpt", { dim = 128, layers = 4 })
--   diloco.estimate.params("gpt", o)                  --> 827,392 exactly (= model:num_params())
--   local e = diloco.estimate.training("gpt", o, { batch = 16, ctx = 64 }, "adamw")
--   assert(diloco.estimate.check(e))                  -- or nil, "... needs about 31 GB ..."
--
-- Parameters are counted exactly (spec/validation_spec.lua checks every architecture
-- against a built model).  Training memory is parameters x (1 value + 1 gradient +
-- the optimizer's moments: 2 for AdamW, 1 for momentum SGD), plus the activations the
-- step keeps for backward and their gradients, plus a fixed base for the process and
-- its libraries.  The activation factors were calibrated against the peak resident
-- set (VmHWM) of real training steps (docs/recipes.md, "Memory bound"); they err on
-- the high side, since the estimate only has to catch the hopeless cases.
local diloco = require "diloco"
local M = {}

local F32 = 4

-- Resident set of a diloco-lua process before a model: Lua, OpenBLAS, oneDNN.
M.BASE_BYTES = 64 * 2 ^ 20

-- f32 values a training step keeps per token and layer of a transformer block, in
-- units of dim and of the MLP width (hidden): the norms, qkv, attention output,
-- projections, residuals, fc and its activation, with their gradients in backward
-- and what the storage cache holds for reuse.  Fitted to the peak resident set of
-- dense GPT runs (dim 64..256, ctx 64..256, 2..8 layers) plus a margin of ~25%.
M.BLOCK_DIM_FACTOR = 18
M.BLOCK_HIDDEN_FACTOR = 2.5
-- per token, layer and head, times T: the attention probabilities [B, heads, T, T]
-- kept for backward and their gradient
M.ATTN_FACTOR = 1.5
-- per token, layer and expert visited (top_k): gathered rows, the expert's MLP and
-- the scatter back (measured: MoE steps keep far more than a dense MLP)
M.MOE_HIDDEN_FACTOR = 7
M.MOE_DIM_FACTOR = 4
-- logits and softmax / cross-entropy gradient over the vocabulary (or classes)
M.LOGIT_FACTOR = 3

local function as_integer(n)
  return math.tointeger(n) or n
end

local function norm_params(o, dim)
  return o.norm == "rmsnorm" and dim or 2 * dim
end

local function linear(nin, nout, bias)
  return nin * nout + (bias == false and 0 or nout)
end

-- Parameters of one pre-norm block (attention + MLP or MoE) of width dim.
local function block_params(o, dim, hidden, moe)
  local n = 2 * norm_params(o, dim) + linear(dim, 3 * dim) + linear(dim, dim)
  local mlp = linear(dim, hidden) + linear(hidden, dim)
  if moe then
    n = n + linear(dim, moe.experts, false) + moe.experts * mlp
  else
    n = n + mlp
  end
  return n
end

-- The exact parameter count of model `arch` with checked options o
-- (diloco.nn.model_options).  Arithmetic in floats: a hostile layer count gives a
-- huge number, never an overflow.
function M.params(arch, o)
  if arch == "gpt" then
    local dim = o.dim + 0.0
    local hidden = math.floor(dim * o.mlp_ratio)
    local n = o.vocab * dim + o.ctx * dim + o.layers * block_params(o, dim, hidden, o.moe) + norm_params(o, dim)
    if not o.tied then n = n + linear(dim, o.vocab, false) end
    return as_integer(n)
  elseif arch == "vit" then
    local dim = o.dim + 0.0
    local hidden = math.floor(dim * o.mlp_ratio)
    local tokens = (o.image // o.patch) ^ 2
    return as_integer(linear(o.channels * o.patch * o.patch, dim) + tokens * dim
      + o.layers * block_params(o, dim, hidden) + norm_params(o, dim) + linear(dim, o.classes))
  elseif arch == "mlp" then
    local n, prev = 0.0, o.input
    for _, h in ipairs(o.hidden) do
      n = n + linear(prev, h)
      prev = h
    end
    return as_integer(n + linear(prev, o.classes))
  end
  error("diloco.estimate.params: arch = " .. tostring(arch) .. ": expected gpt, vit or mlp", 2)
end

-- f32 values a training step keeps for one sequence/image (transformers: per
-- sequence of T tokens).
local function activations_per_example(arch, o, T)
  if arch == "mlp" then
    local n = o.input
    for _, h in ipairs(o.hidden) do n = n + 2 * h end
    return 2 * n + M.LOGIT_FACTOR * o.classes
  end
  local dim = o.dim + 0.0
  local hidden = math.floor(dim * o.mlp_ratio)
  local per_token_block = M.BLOCK_DIM_FACTOR * dim + M.BLOCK_HIDDEN_FACTOR * hidden
  if o.moe then
    -- each token visits top_k experts: gathered inputs, outputs and the MLP inside
    per_token_block = per_token_block + o.moe.top_k * (M.MOE_HIDDEN_FACTOR * hidden + M.MOE_DIM_FACTOR * dim)
      + 4 * o.moe.experts
  end
  local attn = M.ATTN_FACTOR * o.heads * T
  local out = arch == "gpt" and o.vocab or o.classes / T
  return T * (o.layers * (per_token_block + attn) + 4 * dim + M.LOGIT_FACTOR * out)
end

-- The memory of training model `arch` (checked options o) on data d (batch, and
-- ctx for text) with optimizer kind ("adamw", "sgd", "nesterov").  Returns
-- { params, param_bytes, activation_bytes, bytes }.
function M.training(arch, o, d, optim_kind)
  local params = M.params(arch, o)
  local copies = 2 + (optim_kind == "adamw" and 2 or 1)
  local T = arch == "gpt" and math.min(d.ctx, o.ctx) or arch == "vit" and (o.image // o.patch) ^ 2 or 1
  local act = d.batch * activations_per_example(arch, o, T) * F32
  local pbytes = params * copies * F32
  return { what = "the model and its training step", training = true, params = as_integer(params), param_bytes = pbytes,
    activation_bytes = act, bytes = M.BASE_BYTES + pbytes + act }
end

-- The memory of inference (sample): the parameters, one sequence of ctx tokens
-- without gradients, and the base.
function M.inference(arch, o)
  local params = M.params(arch, o)
  local T = arch == "gpt" and o.ctx or 1
  local act = activations_per_example(arch, o, T) * F32 / 2
  return { what = "the model", params = as_integer(params), param_bytes = params * F32,
    activation_bytes = act, bytes = M.BASE_BYTES + params * F32 + act }
end

-- "1.5 GB", "3.2e+04 TB"
function M.human_bytes(b)
  local units = { "bytes", "KB", "MB", "GB", "TB" }
  local i = 1
  while b >= 1024 and i < #units do
    b = b / 1024
    i = i + 1
  end
  if i == 1 then return string.format("%d bytes", b) end
  if b >= 1e4 then return string.format("%.2g %s", b, units[i]) end
  return string.format("%.1f %s", b, units[i])
end

local function human_count(n)
  if n >= 1e12 then return string.format("%.3g", n) end
  return diloco.progress.human(n)
end

-- true when estimate e fits in limit bytes (default: the machine's memory), else nil
-- and a message with the estimate.
function M.check(e, limit)
  limit = limit or diloco.physical_memory()
  if not limit or e.bytes <= limit then return true end
  return nil, string.format("%s would need about %s (%s parameters: %s%s; activations: %s), more than this "
    .. "machine's %s of memory: make the model%s smaller", e.what, M.human_bytes(e.bytes), human_count(e.params), M.human_bytes(e.param_bytes),
    e.training and " with gradients and optimizer state" or "", M.human_bytes(e.activation_bytes),
    M.human_bytes(limit), e.training and " or data.batch" or "")
end

return M

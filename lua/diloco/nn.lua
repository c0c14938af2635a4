-- diloco.nn: neural-network modules in the torch/nn convention over diloco Tensors.
--
-- Lua builds the model and calls one fused op per layer; C computes.  Nothing here
-- loops over elements or rows of a tensor (the one exception: MoE reads its top-k
-- routing table once per forward to build the per-expert row lists).
--
--     local nn = diloco.nn
--     local gpt = nn.GPT { vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, seed = 1 }
--     local loss = gpt:loss(x, y)          -- x, y: [B, T] token ids
--     loss:backward()
--     for _, p in ipairs(gpt:parameters()) do print(p.name, p.tensor.shape) end
--
-- Parameter layout is PyTorch's (Linear weight [out, in]) and parameter names are
-- dotted paths in construction order (docs/nn.md lists them), so a PyTorch mirror
-- of a model has the same state-dict keys in the same order.
--
-- This file: option checking, the Module base, and the layers; the mixture of
-- experts is in diloco/nn/moe.lua and the whole models (GPT, ViT, MLPClassifier) in
-- diloco/nn/models.lua.
local diloco = require "diloco"

local nn = {}
local sqrt, floor, type, select = math.sqrt, math.floor, type, select

-- ---------------------------------------------------------------------------
-- errors and option checking
-- ---------------------------------------------------------------------------

-- Raises msg at the first caller outside diloco/nn*.lua, so a bad option points
-- at the user's line, not into this file.
local function raise(msg)
  local n = 2
  while true do
    local info = debug.getinfo(n, "S")
    if not info then error(msg, 0) end
    if info.what ~= "C" and not info.source:find("diloco[/\\]nn[%./\\]") then error(msg, n) end
    n = n + 1
  end
end

local function show(v)
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) == "table" then
    local parts = {}
    for i = 1, math.min(#v, 8) do parts[i] = show(v[i]) end
    return "{" .. table.concat(parts, ", ") .. (#v > 8 and ", ..." or "") .. "}"
  end
  return tostring(v)
end

local GENERATOR_MT = getmetatable(diloco.Generator(0))

local function is_generator(v) return getmetatable(v) == GENERATOR_MT end

-- kind -> {test(v) -> ok[, normalised value], description}
local KINDS = {
  posint = { function(v)
    local i = math.type(v) and math.tointeger(v)
    return i ~= nil and i >= 1, i
  end, "a positive integer" },
  int = { function(v)
    local i = math.type(v) and math.tointeger(v)
    return i ~= nil, i
  end, "an integer" },
  posnum = { function(v) return type(v) == "number" and v > 0 and v < math.huge end, "a positive number" },
  nonneg = { function(v) return type(v) == "number" and v >= 0 and v < math.huge end,
    "a non-negative number" },
  prob = { function(v) return type(v) == "number" and v >= 0 and v < 1 end, "a number in [0, 1)" },
  boolean = { function(v) return type(v) == "boolean" end, "true or false" },
  generator = { function(v) return is_generator(v) end, "a diloco.Generator" },
  table = { function(v) return type(v) == "table" end, "a table" },
  intlist = { function(v)
    if type(v) ~= "table" then return false end
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    if n ~= #v then return false end
    local out = {}
    for i = 1, #v do
      local k = math.type(v[i]) and math.tointeger(v[i])
      if not k or k < 1 then return false end
      out[i] = k
    end
    return true, out
  end, "a list of positive integers" },
}

-- Checks value v of option `name` of `fn` against spec kind (a KINDS key, or a list
-- of allowed strings); returns the normalised value.
local function check_value(fn, name, v, kind)
  if type(kind) == "table" then
    for _, s in ipairs(kind) do
      if v == s then return v end
    end
    local allowed = {}
    for i, s in ipairs(kind) do allowed[i] = show(s) end
    raise(("%s: %s = %s: expected one of %s"):format(fn, name, show(v), table.concat(allowed, ", ")))
  end
  local k = KINDS[kind]
  local ok, norm = k[1](v)
  if not ok then
    raise(("%s: %s = %s (a %s): expected %s"):format(fn, name, show(v), type(v), k[2]))
  end
  if norm ~= nil then return norm end
  return v
end

-- opts (a table or nil) against schema {name = {kind, default}}: unknown names and
-- wrong types raise naming the option; returns a new table with the defaults filled.
local function check_opts(fn, opts, schema)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    raise(("%s: options must be a table, got %s"):format(fn, show(opts)))
  end
  for k in pairs(opts) do
    if schema[k] == nil then
      local names = {}
      for n in pairs(schema) do names[#names + 1] = n end
      table.sort(names)
      raise(("%s: unknown option %s (allowed: %s)"):format(fn, show(k), table.concat(names, ", ")))
    end
  end
  local o = {}
  for k, s in pairs(schema) do
    local v = opts[k]
    if v == nil then v = s[2] end
    if v ~= nil then v = check_value(fn, k, v, s[1]) end
    o[k] = v
  end
  return o
end

-- A positional argument: "Linear: in = 0 (a number): expected a positive integer".
local function check_arg(fn, name, v, kind)
  if v == nil then raise(("%s: missing argument %s (%s)"):format(fn, name, KINDS[kind][2])) end
  return check_value(fn, name, v, kind)
end

local function check_divides(fn, heads, dim)
  if dim % heads ~= 0 then
    raise(("%s: heads = %d does not divide dim = %d"):format(fn, heads, dim))
  end
end

-- hidden width dim * ratio, which must come out a positive integer
local function ratio_width(fn, dim, ratio)
  local h = dim * ratio
  if h ~= floor(h) or h < 1 then
    raise(("%s: mlp_ratio = %s times dim = %d is %s, not a positive integer"):format(
      fn, show(ratio), dim, show(h)))
  end
  return floor(h)
end

-- ---------------------------------------------------------------------------
-- parameter initialisation
-- ---------------------------------------------------------------------------

-- N(0, std) leaf from rng (a Generator) or the module generator (diloco.seed).
local function randn_param(rng, shape, std)
  local o = { std = std, requires_grad = true }
  if rng then return rng:randn(shape, o) end
  return diloco.randn(shape, o)
end

local function const_param(shape, v)
  return diloco.full(shape, v):requires_grad_()
end

-- ---------------------------------------------------------------------------
-- Module
-- ---------------------------------------------------------------------------

local Module = {}
Module.__index = Module
Module.__name = "Module"
nn.Module = Module

function Module.__call(self, ...) return self:forward(...) end

-- class(name[, parent]) -> C: C(...) creates an instance and runs C._init(self, ...),
-- which registers parameters and children with add_parameter / add_module.
local function class(name, parent)
  parent = parent or Module
  local c = {}
  c.__index = c
  c.__name = name
  c.__call = Module.__call
  c.__tostring = Module.__tostring
  setmetatable(c, {
    __index = parent,
    __call = function(cls, ...)
      local self = setmetatable({ _params = {}, _children = {}, training = true }, cls)
      cls._init(self, ...)
      return self
    end,
    __tostring = function() return "nn." .. name end,
  })
  return c
end
nn.class = class

-- the built-in classes are also nn.<name>
local function defclass(name)
  local c = class(name)
  nn[name] = c
  return c
end

function Module:_init() end

-- add_parameter(name, t) -> t: self[name] = t, and name joins the ordered parameter
-- list (t should be a leaf with requires_grad).
function Module:_param(name, t)
  self[name] = t
  local ps = self._params
  ps[#ps + 1] = { name, t }
  return t
end
Module.add_parameter = Module._param

-- add_module(name, m[, field]) -> m: a child under name (dots allowed: "blocks.0"),
-- also stored as self[field] unless field is false (default: name).
function Module:_child(name, m, field)
  local cs = self._children
  cs[#cs + 1] = { name, m }
  if field ~= false then self[field or name] = m end
  return m
end
Module.add_module = Module._child

local function collect(m, prefix, out)
  for _, p in ipairs(m._params) do
    local name = prefix .. p[1]
    out[#out + 1] = { name, p[2], name = name, tensor = p[2] }
  end
  for _, c in ipairs(m._children) do collect(c[2], prefix .. c[1] .. ".", out) end
  return out
end

-- Ordered array of parameters: each entry is {name, tensor} (also .name, .tensor),
-- own parameters first, then each child's, in construction order.  A fresh table.
function Module:parameters() return collect(self, "", {}) end

-- The parameter tensor called name ("blocks.0.attn.qkv.weight"), or nil.
function Module:parameter(name)
  for _, p in ipairs(self:parameters()) do
    if p[1] == name then return p[2] end
  end
  return nil
end

-- Ordered array of {name, module} for the direct children.
function Module:children()
  local out = {}
  for i, c in ipairs(self._children) do out[i] = { c[1], c[2], name = c[1], module = c[2] } end
  return out
end

function Module:zero_grad()
  for _, p in ipairs(self._params) do p[2]:zero_grad() end
  for _, c in ipairs(self._children) do c[2]:zero_grad() end
  return self
end

-- train([flag = true]) / eval(): sets .training here and in every descendant.
function Module:train(flag)
  flag = flag ~= false
  self.training = flag
  for _, c in ipairs(self._children) do c[2]:train(flag) end
  return self
end

function Module:eval() return self:train(false) end

function Module:forward()
  raise(("%s: forward is not implemented"):format(getmetatable(self).__name))
end

function Module:num_params()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p[2].numel end
  return n
end

-- Parameters that take part in the forward of one token (MoE counts top_k experts).
function Module:num_active_params()
  local n = 0
  for _, p in ipairs(self._params) do n = n + p[2].numel end
  for _, c in ipairs(self._children) do n = n + c[2]:num_active_params() end
  return n
end

-- Arguments shown by tostring: "Linear(128, 384, bias=true)".
function Module:extra_repr() return "" end

local function group(n)
  local s = tostring(n)
  repeat
    local k
    s, k = s:gsub("^(-?%d+)(%d%d%d)", "%1,%2")
  until k == 0
  return s
end

local function repr(m, indent, lines, label)
  local name = getmetatable(m).__name
  lines[#lines + 1] = indent .. label .. name .. "(" .. m:extra_repr() .. ")"
  for _, c in ipairs(m._children) do repr(c[2], indent .. "  ", lines, "(" .. c[1] .. "): ") end
end

function Module.__tostring(self)
  local lines = {}
  repr(self, "", lines, "")
  lines[1] = lines[1] .. "  [" .. group(self:num_params()) .. " parameters]"
  return table.concat(lines, "\n")
end

-- ---------------------------------------------------------------------------
-- layers
-- ---------------------------------------------------------------------------

-- Linear(in, out, {bias = true, std = 0.02, rng}): weight [out, in], bias [out].
local Linear = defclass("Linear")

function Linear:_init(nin, nout, opts)
  nin = check_arg("Linear", "in", nin, "posint")
  nout = check_arg("Linear", "out", nout, "posint")
  local o = check_opts("Linear", opts, { bias = { "boolean", true }, std = { "nonneg", 0.02 },
    rng = { "generator" } })
  self.in_features, self.out_features = nin, nout
  self:_param("weight", randn_param(o.rng, { nout, nin }, o.std))
  if o.bias then self:_param("bias", const_param({ nout }, 0)) end
end

-- x [..., in] -> [..., out]: one fused op (bias written first, one sgemm over all
-- leading rows accumulating onto it).
function Linear:forward(x)
  return x:linear(self.weight, self.bias)
end

function Linear:extra_repr()
  return ("%d, %d, bias=%s"):format(self.in_features, self.out_features, tostring(self.bias ~= nil))
end

-- Embedding(n, dim, {std = 0.02, rng}): weight [n, dim]; forward(idx) -> [idx..., dim].
local Embedding = defclass("Embedding")

function Embedding:_init(n, dim, opts)
  n = check_arg("Embedding", "n", n, "posint")
  dim = check_arg("Embedding", "dim", dim, "posint")
  local o = check_opts("Embedding", opts, { std = { "nonneg", 0.02 }, rng = { "generator" } })
  self.n, self.dim = n, dim
  self:_param("weight", randn_param(o.rng, { n, dim }, o.std))
end

function Embedding:forward(idx) return self.weight:embedding(idx) end

function Embedding:extra_repr() return ("%d, %d"):format(self.n, self.dim) end

-- LayerNorm(dim, {eps = 1e-5}): weight ones, bias zeros, over the last dim.
-- RMSNorm(dim, {eps = 1e-5}): weight ones.
-- One definition: the class `name`, with a bias parameter when bias, forward(self, x).
local function defnorm(name, bias, forward)
  local Norm = defclass(name)
  function Norm:_init(dim, opts)
    dim = check_arg(name, "dim", dim, "posint")
    local o = check_opts(name, opts, { eps = { "posnum", 1e-5 } })
    self.dim, self.eps = dim, o.eps
    self:_param("weight", const_param({ dim }, 1))
    if bias then self:_param("bias", const_param({ dim }, 0)) end
  end
  Norm.forward = forward
  function Norm:extra_repr() return ("%d, eps=%g"):format(self.dim, self.eps) end
  return Norm
end
local LayerNorm = defnorm("LayerNorm", true, function(self, x) return x:layernorm(self.weight, self.bias, self.eps) end)
local RMSNorm = defnorm("RMSNorm", false, function(self, x) return x:rmsnorm(self.weight, self.eps) end)

local NORMS = { layernorm = LayerNorm, rmsnorm = RMSNorm }
local NORM_NAMES = { "layernorm", "rmsnorm" }

-- Dropout(p, {rng}): zeroes with probability p in training mode; identity in eval.
local Dropout = defclass("Dropout")

function Dropout:_init(p, opts)
  self.p = check_arg("Dropout", "p", p, "prob")
  self.rng = check_opts("Dropout", opts, { rng = { "generator" } }).rng
end

function Dropout:forward(x)
  if self.training and self.p > 0 then return x:dropout(self.p, self.rng) end
  return x
end

function Dropout:extra_repr() return ("p=%g"):format(self.p) end

-- Sequential(m1, m2, ...): children "0", "1", ...; forward chains them.
local Sequential = defclass("Sequential")

function Sequential:_init(...)
  self.n = select("#", ...)
  for i = 1, self.n do
    local m = select(i, ...)
    if getmetatable(m) == nil or getmetatable(m).forward == nil then
      raise(("Sequential: argument %d is %s, not a module"):format(i, show(m)))
    end
    self:_child(tostring(i - 1), m, false)
    self[i] = m
  end
end

function Sequential:forward(x)
  for i = 1, self.n do x = self[i]:forward(x) end
  return x
end

local ACTS = { "gelu", "relu", "silu" }

-- MLP(dim, hidden, {act = "gelu", std = 0.02, proj_std = std, rng}):
-- fc (dim -> hidden), act, proj (hidden -> dim).
local MLP = defclass("MLP")

function MLP:_init(dim, hidden, opts)
  dim = check_arg("MLP", "dim", dim, "posint")
  hidden = check_arg("MLP", "hidden", hidden, "posint")
  local o = check_opts("MLP", opts, { act = { ACTS, "gelu" }, std = { "nonneg", 0.02 },
    proj_std = { "nonneg" }, rng = { "generator" } })
  self.dim, self.hidden, self.act = dim, hidden, o.act
  self._act = diloco[o.act]
  self:_child("fc", Linear(dim, hidden, { std = o.std, rng = o.rng }))
  self:_child("proj", Linear(hidden, dim, { std = o.proj_std or o.std, rng = o.rng }))
end

function MLP:forward(x)
  return self.proj:forward(self._act(self.fc:forward(x)))
end

function MLP:extra_repr() return ("%d, %d, act=%s"):format(self.dim, self.hidden, self.act) end

-- CausalSelfAttention(dim, heads, {causal = true, std = 0.02, proj_std = std, rng}):
-- qkv (dim -> 3 dim, fused q|k|v), one fused attention op, proj (dim -> dim).
local Attention = defclass("CausalSelfAttention")

function Attention:_init(dim, heads, opts)
  dim = check_arg("CausalSelfAttention", "dim", dim, "posint")
  heads = check_arg("CausalSelfAttention", "heads", heads, "posint")
  check_divides("CausalSelfAttention", heads, dim)
  local o = check_opts("CausalSelfAttention", opts, { causal = { "boolean", true },
    std = { "nonneg", 0.02 }, proj_std = { "nonneg" }, rng = { "generator" } })
  self.dim, self.heads, self.causal = dim, heads, o.causal
  self:_child("qkv", Linear(dim, 3 * dim, { std = o.std, rng = o.rng }))
  self:_child("proj", Linear(dim, dim, { std = o.proj_std or o.std, rng = o.rng }))
end

-- x [B, T, dim] -> [B, T, dim]
function Attention:forward(x)
  return self.proj:forward(self.qkv:forward(x):attention(self.heads, self.causal))
end

function Attention:extra_repr()
  return ("%d, heads=%d, causal=%s"):format(self.dim, self.heads, tostring(self.causal))
end

-- ---------------------------------------------------------------------------
-- transformer block
-- ---------------------------------------------------------------------------

-- Block(dim, heads, {mlp_ratio = 4, norm = "layernorm", moe = nil | {experts, top_k,
-- aux_weight, act}, causal = true, act = "gelu", std = 0.02, proj_std = std, rng}):
-- pre-norm GPT-2 block  x = x + attn(ln1(x));  x = x + mlp(ln2(x))  (or moe).
local Block = defclass("Block")

function Block:_init(dim, heads, opts)
  dim = check_arg("Block", "dim", dim, "posint")
  heads = check_arg("Block", "heads", heads, "posint")
  check_divides("Block", heads, dim)
  local o = check_opts("Block", opts, { mlp_ratio = { "posnum", 4 }, norm = { NORM_NAMES, "layernorm" },
    moe = { "table" }, causal = { "boolean", true }, act = { ACTS, "gelu" }, std = { "nonneg", 0.02 },
    proj_std = { "nonneg" }, rng = { "generator" } })
  local hidden = ratio_width("Block", dim, o.mlp_ratio)
  self.dim, self.heads = dim, heads
  local Norm = NORMS[o.norm]
  self:_child("ln1", Norm(dim))
  self:_child("attn", Attention(dim, heads, { causal = o.causal, std = o.std, proj_std = o.proj_std,
    rng = o.rng }))
  self:_child("ln2", Norm(dim))
  if o.moe then
    local m = check_opts("Block: moe", o.moe, { experts = { "posint" }, top_k = { "posint" },
      aux_weight = { "nonneg" }, act = { ACTS } })
    self.ffn = self:_child("moe", nn.MoE(dim, hidden, { experts = m.experts, top_k = m.top_k,
      aux_weight = m.aux_weight, act = m.act or o.act, std = o.std, proj_std = o.proj_std, rng = o.rng }))
  else
    self.ffn = self:_child("mlp", MLP(dim, hidden, { act = o.act, std = o.std, proj_std = o.proj_std,
      rng = o.rng }))
  end
end

function Block:forward(x)
  x = x + self.attn:forward(self.ln1:forward(x))
  return x + self.ffn:forward(self.ln2:forward(x))
end

function Block:extra_repr() return ("%d, heads=%d"):format(self.dim, self.heads) end

-- shared with diloco/nn/models.lua
nn._util = {
  defclass = defclass, raise = raise, check_opts = check_opts, check_arg = check_arg, check_value = check_value,
  check_divides = check_divides, ratio_width = ratio_width, randn_param = randn_param,
  const_param = const_param, is_generator = is_generator, show = show, group = group,
  NORMS = NORMS, NORM_NAMES = NORM_NAMES, ACTS = ACTS,
}

require("diloco.nn.moe")(nn)
require("diloco.nn.models")(nn)

return nn

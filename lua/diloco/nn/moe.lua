-- diloco/nn/moe.lua: the mixture-of-experts feed-forward layer.  Loaded by nn.lua,
-- which passes itself in.
local diloco = require "diloco"

return function(nn)
  local U = nn._util
  local raise, check_opts, check_arg = U.raise, U.check_opts, U.check_arg
  local Linear, MLP, ACTS = nn.Linear, nn.MLP, U.ACTS
  local floor = math.floor

  -- MoE(dim, hidden, {experts = 4, top_k = 2, aux_weight = 0.01, act = "gelu", std = 0.02,
  -- proj_std = std, rng}): router (dim -> experts, no bias) and experts.0.. (MLPs).
  -- Each token goes to its top_k experts, weighted by the router probabilities
  -- renormalised over those k (top_k = 1: the probability itself).  self.aux_loss is
  -- the Switch Transformer load-balancing loss  E * sum_e f_e P_e  (f_e: share of
  -- routing slots sent to e, a constant; P_e: mean router probability of e,
  -- differentiable).
  local MoE = U.defclass("MoE")

  local MOE_SCHEMA = { experts = { "posint", 4 }, top_k = { "posint", 2 }, aux_weight = { "nonneg", 0.01 },
    act = { ACTS, "gelu" }, std = { "nonneg", 0.02 }, proj_std = { "nonneg" }, rng = { "generator" } }

  function MoE:_init(dim, hidden, opts)
    dim = check_arg("MoE", "dim", dim, "posint")
    hidden = check_arg("MoE", "hidden", hidden, "posint")
    local o = check_opts("MoE", opts, MOE_SCHEMA)
    if o.top_k > o.experts then
      raise(("MoE: top_k = %d exceeds experts = %d"):format(o.top_k, o.experts))
    end
    self.dim, self.hidden, self.n_experts, self.top_k = dim, hidden, o.experts, o.top_k
    self.aux_weight, self.act = o.aux_weight, o.act
    self:_child("router", Linear(dim, o.experts, { bias = false, std = o.std, rng = o.rng }))
    self.experts = {}
    for e = 1, o.experts do
      self.experts[e] = self:_child("experts." .. (e - 1),
        MLP(dim, hidden, { act = o.act, std = o.std, proj_std = o.proj_std, rng = o.rng }), false)
    end
  end

  -- x [..., dim] -> [..., dim]; sets self.aux_loss (scalar) and self.load (tokens
  -- routed to each expert, a Lua array).
  function MoE:forward(x)
    local C, E, k = self.dim, self.n_experts, self.top_k
    local shape = x.ndim ~= 2 and x.shape or nil
    local xf = shape and x:reshape(-1, C) or x
    local N = xf:size(1)
    local probs = self.router:forward(xf):softmax()          -- [N, E]
    local vals, idx = probs:topk(k)                           -- [N, k]
    -- top_k = 1 keeps the raw probability (Switch): renormalising one value gives 1 and
    -- would leave the router with no gradient from the task loss
    local w = k > 1 and vals / vals:sum(2, true) or vals

    -- counting sort of the N*k routing slots by expert
    local flat = idx:reshape(-1):tolist()
    local NK = #flat
    local count, start = {}, {}
    for e = 1, E do count[e] = 0 end
    for p = 1, NK do
      local e = floor(flat[p]) + 1
      flat[p] = e
      count[e] = count[e] + 1
    end
    local s = 0
    for e = 1, E do
      start[e] = s
      s = s + count[e]
    end
    local rows, slots, nxt = {}, {}, {}
    for e = 1, E do nxt[e] = start[e] + 1 end
    for p = 1, NK do
      local e = flat[p]
      local q = nxt[e]
      nxt[e] = q + 1
      rows[q] = (p - 1) // k
      slots[q] = p - 1
    end
    local rows_t = diloco.tensor(rows)

    local xs = xf:index_select(rows_t)                        -- [N*k, C], grouped by expert
    local ys = {}
    for e = 1, E do
      local c = count[e]
      if c > 0 then
        ys[#ys + 1] = self.experts[e]:forward(xs:slice(1, start[e] + 1, start[e] + c))
      end
    end
    local y = #ys == 1 and ys[1] or diloco.concat(ys)
    local ws = w:reshape(NK, 1):index_select(diloco.tensor(slots))     -- [N*k, 1]
    local out = diloco.zeros(N, C):index_add(rows_t, y * ws)

    local f = {}
    for e = 1, E do f[e] = count[e] / NK end
    self.aux_loss = (probs:mean(1) * diloco.tensor(f)):sum():scale(E)
    self.load = count
    if shape then return out:reshape(shape) end
    return out
  end

  function MoE:num_active_params()
    return self.router:num_active_params() + self.top_k * self.experts[1]:num_active_params()
  end

  function MoE:extra_repr()
    return ("%d, %d, experts=%d, top_k=%d, act=%s"):format(self.dim, self.hidden, self.n_experts,
      self.top_k, self.act)
  end
end

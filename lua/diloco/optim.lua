-- diloco.optim: optimizer specs for recipes and building the C optimizer from one.
--
--   inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, warmup = 100, schedule = "cosine" }
--   outer = diloco.optim.nesterov { lr = 0.7, momentum = 0.9 }
--
-- Specs are plain tables (so --set inner.lr=1e-3 works).
local diloco = require "diloco"
local M = {}

local function spec(kind)
  return function(t)
    t = t or {}
    if type(t) ~= "table" then error("diloco.optim." .. kind .. ": expected a table of options", 2) end
    t.kind = kind
    return t
  end
end

M.adamw = spec("adamw")
M.sgd = spec("sgd")
M.nesterov = spec("nesterov")

-- The C optimizer over `params` (a diloco.Params) for a validated inner spec.
function M.build(params, s)
  local o = { lr = s.lr, weight_decay = s.weight_decay, no_decay = s.no_decay }
  if s.kind == "adamw" then
    o.kind, o.beta1, o.beta2, o.eps = "adamw", s.beta1, s.beta2, s.eps
  else
    o.kind, o.momentum, o.nesterov = "sgd", s.momentum, s.kind == "nesterov"
  end
  return diloco.Optimizer(params, o)
end

-- Learning rate at 0-based step for a validated inner spec and run length.
function M.lr_at(s, step, total)
  return diloco.lr_at(step, { schedule = s.schedule, lr = s.lr, warmup = s.warmup, total = total, min_lr = s.min_lr })
end

return M

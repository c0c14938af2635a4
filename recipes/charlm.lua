-- charlm: a byte-level GPT on the fortunes corpus (Debian package `fortunes`).
-- 0.83M parameters (834,304); 3000 steps in ~1.2 min on 2 cores whose oneDNN sgemm peaks
-- at ~430 GF/s (docs/performance.md), proportionally longer on slower cores.
--   diloco-lua run recipes/charlm.lua [--set steps=500] [--metrics charlm.jsonl]
--   diloco-lua sample runs/charlm/model.safetensors --prompt "The "
local diloco = require "diloco"

return diloco.recipe {
  model = { arch = "gpt", vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true },
  data = diloco.data.text { path = "/usr/share/games/fortunes", drop_line = "%", ctx = 64, batch = 16 },
  inner = diloco.optim.adamw { lr = 3e-3, weight_decay = 0.1, schedule = "cosine", min_lr = 3e-4,
    clip = 1.0 },
  steps = 3000,
  eval = { every = 250, batches = 32 },
}

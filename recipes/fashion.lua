-- fashion: Fashion-MNIST classification (Debian package `dataset-fashion-mnist`).
-- An MLP by default; `--set model.arch=vit` swaps in the ViT-tiny (slower, see docs).
local diloco = require "diloco"

return diloco.recipe {
  model = { arch = "mlp", input = 784, hidden = { 256, 128 }, classes = 10 },
  data = diloco.data.fashion { batch = 64 },
  inner = diloco.optim.adamw { lr = 2e-3, weight_decay = 0.05, schedule = "cosine", min_lr = 1e-4 },
  steps = 4000,
  eval = { every = 500, batches = 40 },
}

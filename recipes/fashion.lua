-- fashion: Fashion-MNIST classification (Debian package `dataset-fashion-mnist`).
-- An MLP; for the ViT-tiny use model = { arch = "vit", dim = 64, layers = 4, heads = 4 } (docs/nn.md).
local diloco = require "diloco"

return diloco.recipe {
  model = { arch = "mlp", input = 784, hidden = { 256, 128 }, classes = 10 },
  data = diloco.data.fashion { batch = 64 },
  inner = diloco.optim.adamw { lr = 2e-3, weight_decay = 0.05, schedule = "cosine", min_lr = 1e-4 },
  steps = 8000,
  eval = { every = 1000, batches = 40 },
}

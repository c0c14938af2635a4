-- diloco.data: dataset specs for recipes, and opening them as loaders.
--
--   data = diloco.data.text { path = "/usr/share/games/fortunes", ctx = 64, batch = 16 }
--   data = diloco.data.fashion { batch = 64 }
--
-- A spec is a plain table (so --set data.batch=32 works); M.open turns it into the
-- train and eval loaders of one learner's shard (C: diloco.TextData / ImageData).
local diloco = require "diloco"
local M = {}

local function spec(kind)
  return function(t)
    t = t or {}
    if type(t) ~= "table" then error("diloco.data." .. kind .. ": expected a table of options", 2) end
    t.kind = kind
    return t
  end
end

M.text = spec("text")
M.fashion = spec("fashion")
M.images = spec("images")
M.synthetic_text = spec("synthetic_text")
M.synthetic_images = spec("synthetic_images")

-- diloco.TextData / ImageData return nil, message, code when their files cannot be
-- read (and raise on bad options).  M.open raises such a failure as the one error
-- type of the pure Lua, {diloco_error = message, code = 1, status = code}.
local function opened(ds, msg, code)
  if not ds then error({ diloco_error = msg, code = 1, status = code }, 0) end
  return ds
end

local FASHION = {
  images = "train-images-idx3-ubyte.gz", labels = "train-labels-idx1-ubyte.gz",
  test_images = "t10k-images-idx3-ubyte.gz", test_labels = "t10k-labels-idx1-ubyte.gz",
}

-- Opens the loaders of shard `shard` (1-based) of `shards` for a validated data spec.
-- Returns { train = Loader, eval = Loader, kind = "text"|"images", tokens_per_batch,
--           vocab | classes, dataset = the C dataset(s) }.
function M.open(d, shard, shards, seed)
  local r = { kind = (d.kind == "text" or d.kind == "synthetic_text") and "text" or "images" }
  if r.kind == "text" then
    local ds
    if d.kind == "text" then
      ds = opened(diloco.TextData { path = d.path, chunk = d.chunk, eval_fraction = d.eval_fraction,
        split_seed = 0, drop_line = d.drop_line })
    else
      ds = diloco.TextData { synthetic = d.bytes, seed = seed, chunk = d.chunk, eval_fraction = d.eval_fraction }
    end
    r.dataset = ds
    r.vocab = 256
    r.train = ds:loader { split = "train", batch = d.batch, ctx = d.ctx, shard = shard, shards = shards, seed = seed }
    r.eval = ds:loader { split = "eval", batch = d.batch, ctx = d.ctx, shard = 1, shards = 1, seed = seed }
    r.tokens_per_batch = d.batch * d.ctx
  else
    local train, test
    local train_split, test_split = "all", "all"
    if d.kind == "synthetic_images" then
      -- one set (the class patterns come from the seed) with a held-out fifth
      train = diloco.ImageData { synthetic = d.count, classes = d.classes, rows = 28, cols = 28, seed = seed,
        eval_fraction = 0.2 }
      test, train_split, test_split = train, "train", "eval"
    else
      local files = {}
      for k, name in pairs(FASHION) do
        files[k] = d[k] or (d.kind == "fashion" and (d.dir .. "/" .. name)) or nil
      end
      train = opened(diloco.ImageData { images = files.images, labels = files.labels, classes = d.classes })
      if files.test_images and files.test_labels then
        test = opened(diloco.ImageData { images = files.test_images, labels = files.test_labels,
          classes = d.classes })
      else
        test = train
      end
    end
    r.dataset = { train = train, test = test }
    r.classes = d.classes
    r.rows, r.cols = train.rows, train.cols
    r.train = train:loader { split = train_split, batch = d.batch, shard = shard, shards = shards, seed = seed,
      shuffle = true }
    r.eval = test:loader { split = test_split, batch = d.batch, shard = 1, shards = 1, seed = seed, shuffle = false }
    local _, held_out = test:sizes()
    r.eval_batches_all = math.ceil((test_split == "eval" and held_out or test.count) / d.batch)
    r.tokens_per_batch = d.batch
  end
  return r
end

return M

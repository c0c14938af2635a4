-- Evaluation reads a fixed subset of the eval split: eval.batches batches evenly spread
-- over the whole split (diloco.train.eval_starts / eval_batches, Loader:batch_at), or
-- the whole split exactly once when eval.batches reaches its batches per epoch.
local diloco = require "diloco"
local train = diloco.train
local H = require "spec.helpers"

local function text_data()
  -- ~2 KB of eval text in 1000-byte chunks: a few chunks, ~125 windows of ctx 16
  return diloco.TextData { synthetic = 20000, seed = 7, chunk = 1000, eval_fraction = 0.1 }
end

local function text_loaders(ds, batch, seed, sequential)
  return { kind = "text", eval = ds:loader { split = "eval", batch = batch, ctx = 16, seed = seed,
    sequential = sequential } }
end

-- every row of every batch of the iterator, as strings of byte ids
local function rows_of(it)
  local rows = {}
  for x, y in it do
    local xs, ys = x:tolist(), y:tolist()
    for b = 1, #xs do rows[#rows + 1] = table.concat(xs[b], ",") .. "|" .. table.concat(ys[b], ",") end
  end
  return rows
end

describe("eval_starts", function()
  it("spreads n full, disjoint batches over the whole split", function()
    for _, c in ipairs { { 2239, 16, 32 }, { 2239, 16, 139 }, { 1000, 7, 3 }, { 100, 1, 99 },
      { 10000, 64, 1 }, { 35, 2, 17 } } do
      local items, batch, n = c[1], c[2], c[3]
      local s = train.eval_starts(items, batch, n)
      local what = string.format("items %d, batch %d, n %d", items, batch, n)
      assert.are.equal(n, #s, what)
      assert.are.equal(1, s[1], what)                              -- the start of the split
      -- the last in the last n-th: its 0-based first item is floor((n - 1) * items / n)
      assert.are.equal((n - 1) * items // n, s[n] - 1, what)
      assert.is_true(s[n] >= (n - 1) * items / n, what)
      assert.is_true(s[n] + batch - 1 <= items, what)              -- full
      for i = 2, n do assert.is_true(s[i] - s[i - 1] >= batch, what) end -- increasing, disjoint
      assert.are.same(s, train.eval_starts(items, batch, n), what) -- a function of the numbers
    end
  end)
  it("covers every item once when n reaches the batches of one pass", function()
    for _, c in ipairs { { 2239, 16, 140 }, { 2239, 16, 100000 }, { 64, 16, 4 }, { 5, 8, 1 } } do
      local items, batch, n = c[1], c[2], c[3]
      local s = train.eval_starts(items, batch, n)
      assert.are.equal(math.ceil(items / batch), #s)
      for i, v in ipairs(s) do assert.are.equal((i - 1) * batch + 1, v) end
    end
  end)
end)

describe("eval_batches", function()
  it("reads the windows at the starts, the same for any seed, mode or open", function()
    local ds1, ds2 = text_data(), text_data()
    local a = text_loaders(ds1, 4, 1, true)
    local b = text_loaders(ds2, 4, 99, false) -- another seed, random mode: the same batches
    local W = a.eval.windows
    assert.are.equal(W, b.eval.windows)
    assert.is_true(W > 40)
    local n = 5
    local ra, rb = rows_of(train.eval_batches(a, n)), rows_of(train.eval_batches(b, n))
    assert.are.equal(n * 4, #ra)
    assert.are.same(ra, rb)
    -- batch i row r is window starts[i] + r - 1 of a sequential pass (batch 1 = window k)
    local one = ds1:loader { split = "eval", batch = 1, ctx = 16 }
    local want = {}
    for _, s in ipairs(train.eval_starts(W, 4, n)) do
      for r = 0, 3 do
        one:set_state { cursor = s - 1 + r }
        local x, y = one:next()
        want[#want + 1] = rows_of(function() local a, b = x, y; x = nil; return a, b end)[1]
      end
    end
    assert.are.same(want, ra)
    -- the loaders' cursors are untouched
    assert.are.equal(0, a.eval:state().cursor)
    assert.are.equal(0, b.eval:state().cursor)
  end)

  it("reads the whole split once when eval.batches >= its batches: same mean as a sequential pass",
    function()
      local ds = text_data()
      local L = text_loaders(ds, 8, 3, true)
      local W, P = L.eval.windows, L.eval.batches_per_epoch
      assert.are.equal(math.ceil(W / 8), P)
      assert.is_true(W % 8 ~= 0) -- so the last batch is short
      local whole = rows_of(train.eval_batches(L, P))
      assert.are.equal(W, #whole)
      assert.are.same(whole, rows_of(train.eval_batches(L, 10 * P)))
      -- every window exactly once, in order: a sequential pass with batch 1 and W batches
      local seq = ds:loader { split = "eval", batch = 1, ctx = 16 }
      local k = 0
      local pass = rows_of(function()
        k = k + 1
        if k <= W then return seq:next() end
      end)
      assert.are.same(pass, whole)

      -- the mean loss weights every window once
      local model = train.build_model({ arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 }, 5)
      local e = train.evaluate(model, L, P)
      assert.are.same(e, train.evaluate(model, L, P + 1000))
      local total = 0
      model:eval()
      seq:reset()
      diloco.no_grad(function()
        for _ = 1, W do
          local x, y = seq:next()
          local _, ce = model:loss(x, y)
          total = total + ce:item()
        end
      end)
      model:train()
      assert.is_true(H.close(total / W, e.loss, 1e-5),
        string.format("whole split %.7f, sequential pass %.7f", e.loss, total / W))
      -- a subset: the same number from another open, seed and mode
      local sub = train.evaluate(model, L, 3)
      assert.are.same(sub, train.evaluate(model, text_loaders(text_data(), 8, 42, false), 3))
    end)

  it("ends a run with the eval.batches subset and, with eval.final_all, the whole split", function()
    local ds = text_data()
    local L = text_loaders(ds, 8, 3, true)
    local W, P = L.eval.windows, L.eval.batches_per_epoch
    local model = train.build_model({ arch = "gpt", vocab = 256, ctx = 16, dim = 16, layers = 1, heads = 2 }, 6)
    local r = { eval = { batches = 3, final_all = true } }
    local ev = {}
    local final, whole = train.final_eval(model, L, r, ev)
    assert.are.same(train.evaluate(model, L, 3), final)     -- the subset the curve used
    assert.are.equal(3 * 8, final.rows)
    assert.are.same(train.evaluate(model, L, P), whole)     -- every window once
    assert.are.equal(W, whole.rows)
    assert.are.equal(W, train.eval_batches_all(L) * 8 - (8 - W % 8))
    assert.are.same({ loss_all = whole.loss, rows_all = W }, ev)
    local summary = train.all_fields({}, whole)
    assert.are.same({ final_eval_loss_all = whole.loss, final_eval_rows_all = W }, summary)
    -- off: the subset alone
    r.eval.final_all = false
    ev = {}
    final, whole = train.final_eval(model, L, r, ev)
    assert.is_nil(whole)
    assert.are.same({}, ev)
    -- a subset that is the whole split already: one pass, reported as both
    r.eval.batches, r.eval.final_all = P, true
    final, whole = train.final_eval(model, L, r, ev)
    assert.are.equal(final, whole)
    assert.are.equal(W, whole.rows)
  end)

  it("spreads image batches too and covers every example once for the final eval", function()
    local d = diloco.ImageData { synthetic = 500, classes = 4, rows = 6, cols = 6, seed = 2, eval_fraction = 0.2 }
    local _, held_out = d:sizes()
    local L = { kind = "images", eval = d:loader { split = "eval", batch = 16, shuffle = false } }
    local shuffled = { kind = "images", eval = d:loader { split = "eval", batch = 16, seed = 5 } }
    local P = L.eval.batches_per_epoch
    assert.are.equal(math.ceil(held_out / 16), P)
    local labels = function(it)
      local out = {}
      for _, y in it do
        for _, v in ipairs(y:tolist()) do out[#out + 1] = v end
      end
      return out
    end
    local all = labels(train.eval_batches(L, P))
    assert.are.equal(held_out, #all)
    local pass = {}
    for _ = 1, P do
      local _, y = L.eval:next()
      for _, v in ipairs(y:tolist()) do pass[#pass + 1] = v end
    end
    assert.are.same(pass, all)
    -- a shuffled loader gives the same subset (batch_at reads in shard order)
    assert.are.same(labels(train.eval_batches(L, 3)), labels(train.eval_batches(shuffled, 3)))
    assert.are.equal(3 * 16, #labels(train.eval_batches(L, 3)))
  end)

  it("refuses an index outside the split, naming it and the range", function()
    local L = text_loaders(text_data(), 4, 1, true)
    local W = L.eval.windows
    assert.matches(string.format("index %d, expected an integer in [1, %d] (the eval split's windows)", W + 1, W),
      H.error_of(L.eval.batch_at, L.eval, W + 1), 1, true)
    assert.matches("index 0, expected an integer in [1, ", H.error_of(L.eval.batch_at, L.eval, 0), 1, true)
    local x = L.eval:batch_at(W)
    assert.are.same({ 1, 16 }, x.shape)
  end)
end)

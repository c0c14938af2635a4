-- diloco.TextData, diloco.ImageData and their loaders seen from Lua: shapes and
-- contents of batches, 1-based shards, resumable cursors, lifetimes, and the error
-- messages for every way a caller can get the options wrong.
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

local function assert_error_contains(needle, fn, ...)
  local err = error_of(fn, ...)
  assert(err:find(needle, 1, true), ("expected an error containing %q, got %q"):format(needle, err))
end

-- An environmental failure (a file that is missing, unreadable or not valid) is
-- returned as nil, message, code, like io.open; asserts that and the message.
local function assert_fails(needle, code, fn, ...)
  local v, msg, c = fn(...)
  assert.is_nil(v)
  assert(tostring(msg):find(needle, 1, true), ("expected a message containing %q, got %q"):format(needle, tostring(msg)))
  assert.are.equal(code, c)
end

local tmp = os.tmpname()
os.remove(tmp)
assert(os.execute("mkdir -p '" .. tmp .. "'"))
local function tpath(name) return tmp .. "/" .. name end
local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

teardown(function() os.execute("rm -rf '" .. tmp .. "'") end)

-- Tensors equal in shape and every value.
local function same(a, b)
  local x, y = a:tolist(), b:tolist()
  if #x ~= #y then return false end
  for i = 1, #x do
    if type(x[i]) == "table" then
      if #x[i] ~= #y[i] then return false end
      for j = 1, #x[i] do if x[i][j] ~= y[i][j] then return false end end
    elseif x[i] ~= y[i] then
      return false
    end
  end
  return true
end

describe("TextData", function()
  it("generates synthetic text and reports its split", function()
    local d = diloco.TextData { synthetic = 100000, seed = 3, chunk = 1000 }
    assert.are.equal(256, d.vocab)
    assert.are.equal(100000, d.bytes)
    assert.are.equal(100, d.chunks)
    local train, eval = d:sizes()
    assert.are.equal(100000, train + eval)
    assert.is_true(eval > 0 and eval < 20000)
    assert.matches("TextData%(100000 bytes", tostring(d))
    local again = diloco.TextData { synthetic = 100000, seed = 3, chunk = 1000 }
    assert.are.equal(d:text(), again:text())
    assert.are_not.equal(d:text(), diloco.TextData { synthetic = 100000, seed = 4 }:text())
  end)

  it("strips control bytes and drops separator lines", function()
    write(tpath("f.txt"), "one\r\ntwo\1\127\n%\nthree%\n%\nfour")
    local d = diloco.TextData { path = tpath("f.txt"), drop_line = "%" }
    assert.are.equal("one\ntwo\nthree%\nfour\n", d:text())
    assert.are.equal("two", d:text(5, 7))
    assert.are.equal(1, d.files)
  end)

  it("reads a directory in name order, skipping .dat files and binaries", function()
    os.execute("mkdir -p '" .. tpath("dir/sub") .. "'")
    write(tpath("dir/b"), "bee\n")
    write(tpath("dir/a"), "ay\n")
    write(tpath("dir/a.dat"), "index\n")
    write(tpath("dir/c"), "x\0y\n")
    write(tpath("dir/sub/d"), "dee\n")
    local d = diloco.TextData { path = tpath("dir") }
    assert.are.equal("ay\nbee\ndee\n", d:text())
    assert.are.equal(3, d.files)
  end)

  it("rejects bad options with the field, the value and what is allowed", function()
    assert_error_contains("TextData: eval_fraction = 1.5, expected a number in [0, 1)",
      diloco.TextData, { synthetic = 1000, eval_fraction = 1.5 })
    assert_error_contains("TextData: chunk = 0, expected an integer in [1,",
      diloco.TextData, { synthetic = 1000, chunk = 0 })
    assert_error_contains('TextData: path = 42, expected a string', diloco.TextData, { path = 42 })
    assert_error_contains("TextData: unknown option \"pth\" (known: path, synthetic",
      diloco.TextData, { pth = "/tmp" })
    assert_error_contains("give either path", diloco.TextData, {})
    assert_error_contains("got both", diloco.TextData, { path = "/tmp", synthetic = 10 })
    assert_fails(tpath("missing") .. ": No such file or directory", "DLC_ERR_IO",
      diloco.TextData, { path = tpath("missing") })
    write(tpath("empty"), "")
    local _, _, code = diloco.TextData { path = tpath("empty") }
    assert_fails("no text", code, diloco.TextData, { path = tpath("empty") })
    assert.matches("^DLC_ERR_", code)
    assert.has_error(function() diloco.TextData("x") end)
  end)

  it("can be closed, idempotently, and then refuses use", function()
    local d = diloco.TextData { synthetic = 1000 }
    d:close()
    d:close()
    assert.is_true(d.closed)
    assert_error_contains("closed", d.sizes, d)
    do local e <close> = diloco.TextData { synthetic = 1000 } end
  end)
end)

describe("text loaders", function()
  local d = diloco.TextData { synthetic = 200000, seed = 1, chunk = 1000, eval_fraction = 0.1 }

  it("yields [B,T] byte ids with y = x shifted by one", function()
    local l = d:loader { batch = 4, ctx = 16, seed = 7 }
    local x, y = l:next()
    assert.are.same({ 4, 16 }, x.shape)
    assert.are.same({ 4, 16 }, y.shape)
    local xs, ys = x:tolist(), y:tolist()
    for b = 1, 4 do
      for j = 1, 15 do assert.are.equal(xs[b][j + 1], ys[b][j]) end
      for j = 1, 16 do
        local v = xs[b][j]
        assert(v >= 0 and v <= 255 and v == math.floor(v), "byte id " .. v)
      end
    end
    assert.are.equal("text", l.kind)
    assert.are.equal(4, l.batch)
    assert.are.equal(16, l.ctx)
    assert.are.equal("train", l.split)
    assert.is_false(l.sequential)
  end)

  it("saves and restores its cursor as a plain table of integers", function()
    local l = d:loader { batch = 8, ctx = 32, shard = 2, shards = 3, seed = 5 }
    for _ = 1, 5 do l:next() end
    local st = l:state()
    assert.are.same({ cursor = 5 }, st)
    for k, v in pairs(st) do assert.are.equal("integer", math.type(v), k) end
    local a1, b1 = l:next()
    local a2 = l:next()
    assert.is_false(same(a1, a2))
    -- same loader, restored
    assert.are.equal(l, l:set_state(st))
    local c1, d1 = l:next()
    assert.is_true(same(a1, c1) and same(b1, d1))
    -- a fresh loader with the same options, restored (what a resumed learner does)
    local fresh = d:loader { batch = 8, ctx = 32, shard = 2, shards = 3, seed = 5 }
    fresh:set_state { cursor = 5 }
    assert.is_true(same(a1, (fresh:next())))
    -- other shards and seeds see other data
    local other = d:loader { batch = 8, ctx = 32, shard = 1, shards = 3, seed = 5 }
    other:set_state(st)
    assert.is_false(same(a1, (other:next())))
    local reseeded = d:loader { batch = 8, ctx = 32, shard = 2, shards = 3, seed = 6 }
    reseeded:set_state(st)
    assert.is_false(same(a1, (reseeded:next())))
    l:reset()
    assert.are.same({ cursor = 0 }, l:state())
  end)

  it("validates states", function()
    local l = d:loader { batch = 2, ctx = 8 }
    assert_error_contains("field cursor is missing", l.set_state, l, {})
    assert_error_contains("cursor = -1, expected an integer >= 0", l.set_state, l, { cursor = -1 })
    assert_error_contains('cursor = "3", expected an integer >= 0', l.set_state, l, { cursor = "3" })
    assert_error_contains("cursor = 1.5", l.set_state, l, { cursor = 1.5 })
    assert_error_contains("Loader:set_state (text): unknown field", l.set_state, l, { epoch = 1, position = 0 })
    assert.has_error(function() l:set_state(5) end)
  end)

  it("shards are 1-based, disjoint and cover the train split", function()
    local total = 0
    for s = 1, 4 do
      local l = d:loader { batch = 1, ctx = 8, shard = s, shards = 4 }
      assert.are.equal(s, l.shard)
      assert.are.equal(4, l.shards)
      total = total + l.size
    end
    assert.are.equal((d:sizes()), total)
    assert_error_contains("TextData:loader: shard = 0, expected an integer in [1, 4]",
      d.loader, d, { shard = 0, shards = 4 })
    assert_error_contains("shard = 5, expected an integer in [1, 4]", d.loader, d, { shard = 5, shards = 4 })
    assert_error_contains("shards = 0", d.loader, d, { shards = 0 })
  end)

  it("walks the eval split in order, wrapping around, and resets", function()
    local e = d:loader { split = "eval", batch = 3, ctx = 10 }
    assert.is_true(e.sequential)
    assert.are.equal(select(2, d:sizes()), e.size)
    local windows = (e.size - 1) // 10
    assert.are.equal((windows + 2) // 3, e.batches_per_epoch)
    local first = e:next()
    for _ = 2, e.batches_per_epoch do e:next() end
    e:reset()
    assert.is_true(same(first, (e:next())))
  end)

  it("explains a shard too small for one window", function()
    local small = diloco.TextData { synthetic = 1000, chunk = 100, eval_fraction = 0 }
    assert_error_contains("text: train shard 3 of 4 has 200 bytes, fewer than ctx + 1 = 301; " ..
      "use fewer learners or a smaller ctx", small.loader, small, { ctx = 300, shard = 3, shards = 4 })
    assert_error_contains("the eval split is empty", small.loader, small, { split = "eval", ctx = 8 })
    assert_error_contains('split = "test", expected "train", "eval" or "all"',
      small.loader, small, { split = "test" })
    assert_error_contains("batch = 0, expected an integer in [1,", small.loader, small, { batch = 0 })
    assert_error_contains("sequential = 1, expected true or false", small.loader, small, { sequential = 1 })
    assert_error_contains('unknown option "bacth"', small.loader, small, { bacth = 2 })
  end)

  it("keeps its dataset alive and closes idempotently", function()
    local l = diloco.TextData { synthetic = 5000 }:loader { batch = 2, ctx = 8 }
    collectgarbage()
    collectgarbage()
    local x = l:next()
    assert.are.same({ 2, 8 }, x.shape)
    local d2 = diloco.TextData { synthetic = 5000 }
    local l2 = d2:loader { batch = 2, ctx = 8 }
    d2:close()
    assert.are.same({ 2, 8 }, (l2:next()).shape)
    l2:close()
    l2:close()
    assert.is_true(l2.closed)
    assert_error_contains("closed", l2.next, l2)
    do local l3 <close> = d:loader { batch = 2, ctx = 8 } end
  end)

  it("refuses a dataset or loader closed by a metamethod of its own option/state table", function()
    local d2 = diloco.TextData { synthetic = 5000 }
    local opts = setmetatable({ batch = 2, ctx = 8 }, {
      __index = function(_, k) if k == "seed" then d2:close(); collectgarbage() end end })
    assert_error_contains("the dataset has been closed", d2.loader, d2, opts)
    local l = diloco.TextData { synthetic = 5000 }:loader { batch = 2, ctx = 8 }
    local st = setmetatable({}, { __index = function() l:close(); collectgarbage(); return 0 end })
    assert_error_contains("the loader has been closed", l.set_state, l, st)
  end)

  it("draws a batch in microseconds", function()
    local l = d:loader { batch = 16, ctx = 64 }
    local t0 = os.clock()
    for _ = 1, 20000 do l:next() end
    local us = (os.clock() - t0) / 20000 * 1e6
    assert(us < 100, ("next() took %.1f us"):format(us))
  end)
end)

-- IDX files: magic, big-endian dims, u8 payload.
local function be32(v) return string.char(v >> 24 & 255, v >> 16 & 255, v >> 8 & 255, v & 255) end
local function idx_images(n, rows, cols, pixel)
  local t = { be32(0x803), be32(n), be32(rows), be32(cols) }
  for i = 0, n - 1 do
    for j = 0, rows * cols - 1 do t[#t + 1] = string.char(pixel(i, j)) end
  end
  return table.concat(t)
end
local function idx_labels(labels)
  local t = { be32(0x801), be32(#labels) }
  for i = 1, #labels do t[#t + 1] = string.char(labels[i]) end
  return table.concat(t)
end

describe("ImageData", function()
  local N = 20
  local labels = {}
  for i = 1, N do labels[i] = (i - 1) % 10 end
  write(tpath("im"), idx_images(N, 2, 3, function(i, j) return j == 0 and i or 100 + j end))
  write(tpath("lb"), idx_labels(labels))

  it("reads IDX files and yields normalised pixels and labels", function()
    local d = diloco.ImageData { images = tpath("im"), labels = tpath("lb"), mean = 0, std = 1 }
    assert.are.equal(N, d.count)
    assert.are.equal(2, d.rows)
    assert.are.equal(3, d.cols)
    assert.are.equal(10, d.classes)
    local l = d:loader { batch = 8, shuffle = false }
    assert.are.equal(3, l.batches_per_epoch)
    local x, y = l:next()
    assert.are.same({ 8, 6 }, x.shape)
    assert.are.same({ 8 }, y.shape)
    local xs, ys = x:tolist(), y:tolist()
    for r = 1, 8 do
      assert.is_true(math.abs(xs[r][1] - (r - 1) / 255) < 1e-6)
      assert.is_true(math.abs(xs[r][2] - 101 / 255) < 1e-6)
      assert.are.equal(labels[r], ys[r])
    end
    l:next()
    local x3 = l:next()
    assert.are.same({ 4, 6 }, x3.shape) -- the short last batch of an unshuffled epoch
    assert.are.same({ epoch = 0, position = 20 }, l:state())
    l:next()
    assert.are.same({ epoch = 1, position = 8 }, l:state())
  end)

  it("shuffles per epoch, shards by index and restores cursors", function()
    local d = diloco.ImageData { images = tpath("im"), labels = tpath("lb"), mean = 0, std = 1 }
    local seen = {}
    for s = 1, 2 do
      local l = d:loader { batch = 5, shard = s, shards = 2, seed = 9 }
      assert.are.equal(2, l.batches_per_epoch)
      for _ = 1, 2 do
        local x = l:next():tolist()
        for r = 1, 5 do
          local id = math.floor(x[r][1] * 255 + 0.5)
          assert.are.equal(s - 1, id % 2)
          assert.is_nil(seen[id])
          seen[id] = true
        end
      end
    end
    local count = 0
    for _ in pairs(seen) do count = count + 1 end
    assert.are.equal(N, count)

    local l = d:loader { batch = 3, seed = 1 }
    l:next()
    local st = l:state()
    assert.are.same({ epoch = 0, position = 3 }, st)
    local want = {}
    for i = 1, 10 do want[i] = l:next() end -- crosses into epoch 1
    assert.are.equal(1, l:state().epoch)
    local fresh = d:loader { batch = 3, seed = 1 }
    fresh:set_state(st)
    for i = 1, 10 do assert.is_true(same(want[i], (fresh:next()))) end
    assert_error_contains("position = 99", fresh.set_state, fresh, { epoch = 0, position = 99 })
    assert_error_contains("field position is missing", fresh.set_state, fresh, { epoch = 0 })
    assert_error_contains('unknown field "cursor" (known: epoch, position)', fresh.set_state, fresh, { cursor = 1 })
  end)

  it("refuses hostile files with the path and what is wrong", function()
    local good = tpath("im")
    write(tpath("trunc"), idx_images(N, 2, 3, function() return 1 end):sub(1, -5))
    assert_fails(tpath("trunc") .. ": images header says 20 x 2 x 3 = 120 bytes, file has 116 " ..
      "after the header (truncated?)", "DLC_ERR_FORMAT", diloco.ImageData, { images = tpath("trunc"), labels = tpath("lb") })
    write(tpath("trail"), idx_labels(labels) .. "xx")
    assert_fails("file has 2 more after them (trailing bytes", "DLC_ERR_FORMAT",
      diloco.ImageData, { images = good, labels = tpath("trail") })
    assert_fails("magic 0x00000801, expected 0x00000803", "DLC_ERR_FORMAT",
      diloco.ImageData, { images = tpath("lb"), labels = tpath("lb") })
    write(tpath("huge"), be32(0x803) .. be32(1000000) .. be32(1000) .. be32(1000))
    assert_fails("more than max_elements", "DLC_ERR_RANGE",
      diloco.ImageData, { images = tpath("huge"), labels = tpath("lb") })
    assert_fails("label 5 at index 5, expected < classes = 5", "DLC_ERR_RANGE",
      diloco.ImageData, { images = good, labels = tpath("lb"), classes = 5 })
    assert_fails(tpath("nope") .. ": cannot open the images file", "DLC_ERR_IO",
      diloco.ImageData, { images = tpath("nope"), labels = tpath("lb") })
    assert_fails(tpath("nope") .. ": cannot open the labels file", "DLC_ERR_IO",
      diloco.ImageData, { images = good, labels = tpath("nope") })
    -- misuse still raises: the options are wrong, not the files
    assert_error_contains("rows and cols are for synthetic data",
      diloco.ImageData, { images = tpath("nope"), labels = tpath("lb"), rows = 3 })
    -- and a valid set still opens afterwards
    assert.are.equal(N, diloco.ImageData { images = good, labels = tpath("lb") }.count)
  end)

  it("reads gzip-compressed files", function()
    if not os.execute("gzip -c '" .. tpath("im") .. "' > '" .. tpath("im.gz") .. "' 2>/dev/null") then
      return pending("no gzip command")
    end
    os.execute("gzip -c '" .. tpath("lb") .. "' > '" .. tpath("lb.gz") .. "'")
    local a = diloco.ImageData { images = tpath("im.gz"), labels = tpath("lb.gz") }
    local b = diloco.ImageData { images = tpath("im"), labels = tpath("lb") }
    assert.is_true(same(a:loader { batch = 20, shuffle = false }:next(),
      b:loader { batch = 20, shuffle = false }:next()))
  end)

  it("generates learnable synthetic sets and splits them", function()
    local d = diloco.ImageData { synthetic = 500, classes = 4, rows = 8, cols = 8, seed = 2, eval_fraction = 0.2 }
    assert.are.equal(500, d.count)
    assert.are.equal(64, d.features)
    local train, eval = d:sizes()
    assert.are.equal(500, train + eval)
    local l = d:loader { split = "train", batch = 50, shards = 2, shard = 2 }
    assert.is_true(l.shuffle)
    local x, y = l:next()
    assert.are.same({ 50, 64 }, x.shape)
    for _, v in ipairs(y:tolist()) do assert(v >= 0 and v < 4 and v == math.floor(v)) end
    local e = d:loader { split = "eval", batch = 1000 }
    assert.is_false(e.shuffle)
    assert.are.equal(eval, e:next().shape[1])
    assert.matches("ImageData%(500 x 8 x 8, 4 classes", tostring(d))
  end)

  it("rejects bad options", function()
    assert_error_contains("ImageData: classes = 1, expected an integer in [2, 256]",
      diloco.ImageData, { synthetic = 10, classes = 1 })
    assert_error_contains("ImageData: std = 0, expected a number in", diloco.ImageData, { synthetic = 10, std = 0 })
    assert_error_contains("give either images", diloco.ImageData, { images = tpath("im") })
    assert_error_contains("rows and cols are for synthetic data",
      diloco.ImageData, { images = tpath("im"), labels = tpath("lb"), rows = 3 })
    local d = diloco.ImageData { synthetic = 10, rows = 2, cols = 2 }
    assert_error_contains("fewer than one shuffled batch", d.loader, d, { batch = 11 })
    assert_error_contains("eval shard 1 of 1 has 0 examples", d.loader, d, { split = "eval" })
    assert_error_contains("shuffle = \"yes\", expected true or false", d.loader, d, { shuffle = "yes" })
  end)

  it("refuses a dataset or loader closed by a metamethod of its own option/state table", function()
    local d = diloco.ImageData { synthetic = 40, rows = 2, cols = 2 }
    local opts = setmetatable({ batch = 4 }, {
      __index = function(_, k) if k == "seed" then d:close(); collectgarbage() end end })
    assert_error_contains("the dataset has been closed", d.loader, d, opts)
    local l = diloco.ImageData { synthetic = 40, rows = 2, cols = 2 }:loader { batch = 4 }
    local st = setmetatable({ epoch = 0 }, { __index = function() l:close(); collectgarbage(); return 0 end })
    assert_error_contains("the loader has been closed", l.set_state, l, st)
  end)

  it("reads Fashion-MNIST when it is installed", function()
    local dir = "/usr/share/datasets/fashion-mnist/"
    local f = io.open(dir .. "t10k-images-idx3-ubyte.gz", "rb")
    if not f then return pending("Fashion-MNIST not installed") end
    f:close()
    local d = diloco.ImageData { images = dir .. "t10k-images-idx3-ubyte.gz",
      labels = dir .. "t10k-labels-idx1-ubyte.gz" }
    assert.are.equal(10000, d.count)
    assert.are.equal(28, d.rows)
    local x = d:loader { batch = 10000, shuffle = false }:next()
    assert.is_true(math.abs(x:mean():item()) < 0.05) -- normalised with the training statistics
  end)
end)

describe("diloco.data.open", function()
  it("raises the one error type, with the file's message, when a dataset cannot be opened", function()
    local ok, err = pcall(diloco.data.open, { kind = "text", path = tpath("absent.txt"), batch = 2, ctx = 8 }, 1, 1, 0)
    assert.is_false(ok)
    assert.are.equal("table", type(err))
    assert.are.equal(tpath("absent.txt") .. ": No such file or directory", err.diloco_error:match("^text: (.*)$"))
    assert.are.equal("DLC_ERR_IO", err.status)
    ok, err = pcall(diloco.data.open, { kind = "images", images = tpath("absent-im"), labels = tpath("absent-lb"),
      classes = 10, batch = 4 }, 1, 1, 0)
    assert.is_false(ok)
    assert.matches("^" .. tpath("absent%-im"):gsub("%.", "%%.") .. ": cannot open the images file", err.diloco_error)
  end)
end)

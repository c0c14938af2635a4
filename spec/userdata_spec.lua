-- Every userdata type of the binding has one lifetime (dlcL_newtype in lua/ldiloco.h):
-- :close(), a to-be-closed variable and the collector share one idempotent release,
-- and a method on a closed object raises a clear error instead of touching freed memory.
local diloco = require "diloco"
local H = require "spec.helpers"
local error_of = H.error_of

-- One entry per type: make() -> object (and anything that must outlive it),
-- is_closed(obj), use(obj) (a method call that must raise once closed) and the
-- message it raises.
local function tensor() return diloco.ones(4, 4) end
local TYPES = {
  {
    name = "Tensor",
    make = tensor,
    is_closed = function(t) return tostring(t) == "Tensor (freed)" end,
    use = function(t) return t:sum() end,
    message = "tensor has been freed",
  },
  {
    name = "TextData",
    make = function() return diloco.TextData { synthetic = 4096, seed = 1 } end,
    is_closed = function(d) return d.closed end,
    use = function(d) return d:sizes() end,
    message = "TextData: the dataset has been closed",
  },
  {
    name = "ImageData",
    make = function() return diloco.ImageData { synthetic = 64, classes = 4, rows = 4, cols = 4 } end,
    is_closed = function(d) return d.closed end,
    use = function(d) return d:sizes() end,
    message = "ImageData: the dataset has been closed",
  },
  {
    name = "Loader (text)",
    make = function()
      return diloco.TextData { synthetic = 4096, seed = 1 }:loader { batch = 2, ctx = 8 }
    end,
    is_closed = function(l) return l.closed end,
    use = function(l) return l:next() end,
    message = "Loader: the loader has been closed",
  },
  {
    name = "Loader (images)",
    make = function()
      return diloco.ImageData { synthetic = 64, classes = 4, rows = 4, cols = 4 }:loader { batch = 8 }
    end,
    is_closed = function(l) return l.closed end,
    use = function(l) return l:next() end,
    message = "Loader: the loader has been closed",
  },
  {
    name = "Params",
    make = function() return diloco.Params { { "w", tensor() } } end,
    is_closed = function(p) return tostring(p) == "Params(closed)" end,
    use = function(p) return p:count() end,
    message = "Params has been closed",
  },
  {
    name = "Optimizer",
    make = function()
      return diloco.Optimizer(diloco.Params { { "w", tensor() } }, { kind = "sgd", lr = 0.1 })
    end,
    is_closed = function(o) return tostring(o) == "Optimizer(closed)" end,
    use = function(o) return o:step() end,
    message = "Optimizer has been closed",
  },
  {
    name = "Plan",
    make = function() return diloco.Plan(diloco.Params { { "w", tensor() } }) end,
    is_closed = function(p) return p.closed end,
    use = function(p) return p:views(1) end,
    message = "Plan has been closed",
  },
}

describe("every userdata type", function()
  for _, T in ipairs(TYPES) do
    describe(T.name, function()
      it("is open when made, and its method works", function()
        local x = T.make()
        assert.is_false(T.is_closed(x))
        assert.has_no.errors(function() T.use(x) end)
      end)

      it("closes with :close(), twice without harm, and then refuses its methods", function()
        local x = T.make()
        x:close()
        assert.is_true(T.is_closed(x))
        x:close()
        assert.is_true(T.is_closed(x))
        local err = error_of(T.use, x)
        assert(err:find(T.message, 1, true), ("expected %q in %q"):format(T.message, err))
      end)

      it("closes when a to-be-closed variable goes out of scope, and :close() after is harmless", function()
        local kept
        do
          local x <close> = T.make()
          kept = x
          assert.is_false(T.is_closed(x))
        end
        assert.is_true(T.is_closed(kept))
        kept:close()
        assert.is_true(T.is_closed(kept))
        assert(error_of(T.use, kept):find(T.message, 1, true))
      end)

      it("closes when an error leaves the to-be-closed variable's scope", function()
        local kept
        local ok = pcall(function()
          local x <close> = T.make()
          kept = x
          error("boom")
        end)
        assert.is_false(ok)
        assert.is_true(T.is_closed(kept))
      end)

      it("is released by the collector, also after :close()", function()
        local closed_first = T.make()
        closed_first:close()
        for _ = 1, 20 do T.make() end
        closed_first = nil -- luacheck: ignore
        collectgarbage("collect")
        collectgarbage("collect")
        -- still usable afterwards: no double release corrupted the heap
        local y = T.make()
        assert.has_no.errors(function() T.use(y) end)
      end)
    end)
  end

  it("Tensor:free() is an alias of :close()", function()
    assert.are.equal(diloco.Tensor.close, diloco.Tensor.free)
    local t = diloco.zeros(2)
    t:free()
    assert.is_true(tostring(t) == "Tensor (freed)")
    t:close()
  end)

  it("the collector gives tensor memory back (what __gc releases is really freed)", function()
    collectgarbage("collect")
    local before = diloco.bytes_live()
    do
      local _ = diloco.zeros(1024, 1024)
      assert.is_true(diloco.bytes_live() >= before + 4 * 1024 * 1024)
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_true(diloco.bytes_live() < before + 4 * 1024 * 1024)
  end)

  it("closing a Params through GC or <close> frees its tensors for another Params", function()
    local w = tensor()
    do
      local p <close> = diloco.Params { { "w", w } }
    end
    local p2 = diloco.Params { { "w", w } } -- would be refused while the first held w
    assert.are.equal(1, p2:count())
    p2 = nil -- luacheck: ignore
    collectgarbage("collect")
    collectgarbage("collect")
    assert.are.equal(1, diloco.Params({ { "w", w } }):count())
  end)

  it("closes are safe on a dataset still used by a loader", function()
    local d = diloco.TextData { synthetic = 4096, seed = 1 }
    local l = d:loader { batch = 2, ctx = 8 }
    d:close()
    d:close()
    local x = l:next() -- the loader holds its own reference to the data
    assert.are.same({ 2, 8 }, x.shape)
    l:close()
  end)
end)

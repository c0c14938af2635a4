-- The diloco.Tensor API seen from Lua: creation, 1-based positions over 0-based
-- storage, views that share memory, arithmetic, reductions, matmul, formatting,
-- reproducible randomness, and every way a caller can get it wrong.
local diloco = require "diloco"
local H = require "spec.helpers"
local close = H.close
local assert_near = H.assert_near
local error_of = H.error_of

describe("creating tensors", function()
  it("builds a tensor from a nested table and reports its shape", function()
    local t = diloco.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    assert.are.same({ 2, 3 }, t.shape)
    assert.are.equal(2, t.ndim)
    assert.are.equal(6, t.numel)
    assert.are.equal(2, #t)
    assert.are.equal(3, t:size(2))
    assert.are.equal(3, t:size(-1))
    assert.are.same({ 2, 3 }, t:size())
    assert.is_true(diloco.is_tensor(t))
    assert.is_false(diloco.is_tensor({}))
  end)

  it("returns a fresh shape table each time", function()
    local t = diloco.zeros(2, 3)
    local s = t.shape
    s[1] = 99
    assert.are.same({ 2, 3 }, t.shape)
  end)

  it("makes a 0-d tensor from a number", function()
    local t = diloco.tensor(2.5)
    assert.are.same({}, t.shape)
    assert.are.equal(0, t.ndim)
    assert.are.equal(2.5, t:item())
    assert.are.equal(2.5, t:tolist())
  end)

  it("accepts shapes as varargs or as one table", function()
    assert.are.same({ 2, 3 }, diloco.zeros(2, 3).shape)
    assert.are.same({ 2, 3 }, diloco.zeros({ 2, 3 }).shape)
    assert.are.same({ 4 }, diloco.ones(4).shape)
    assert.are.same({ { 1, 1 }, { 1, 1 } }, diloco.ones({ 2, 2 }):tolist())
    assert.are.same({ { 7, 7, 7 } }, diloco.full({ 1, 3 }, 7):tolist())
    assert.are.same({ { 7, 7, 7 } }, diloco.full(1, 3, 7):tolist())
    assert.are.same({ 2, 3, 4, 5 }, diloco.randn(2, 3, 4, 5).shape)
    assert.are.same({ 2, 3 }, diloco.rand({ 2, 3 }).shape)
  end)

  it("arange excludes stop and takes a step", function()
    assert.are.same({ 0, 1, 2, 3, 4 }, diloco.arange(0, 5):tolist())
    assert.are.same({ 0, 1, 2 }, diloco.arange(3):tolist())
    assert.are.same({ 1, 3, 5 }, diloco.arange(1, 7, 2):tolist())
    assert.are.same({ 5, 4, 3 }, diloco.arange(5, 2, -1):tolist())
  end)

  it("round-trips through tolist", function()
    local src = { { { 1, -2 }, { 3.5, 4 } }, { { 0, 0.25 }, { -7, 8 } } }
    local t = diloco.tensor(src)
    assert.are.same({ 2, 2, 2 }, t.shape)
    assert.are.same(src, t:tolist())
    assert.are.same(src, diloco.tensor(t):tolist()) -- tensor(t) copies
  end)

  it("rand honours lo/hi and randn honours mean/std", function()
    local u = diloco.rand(1000, { lo = 2, hi = 3 })
    for _, v in ipairs(u:tolist()) do assert.is_true(v >= 2 and v < 3) end
    local n = diloco.randn(20000, { mean = 5, std = 0.5 })
    assert.is_true(math.abs(n:mean():item() - 5) < 0.02)
    local sd = math.sqrt(((n - 5) * (n - 5)):mean():item())
    assert.is_true(math.abs(sd - 0.5) < 0.02)
  end)

  it("refuses ragged tables, non-numbers, too many dims and negative sizes", function()
    assert.matches("not rectangular", error_of(diloco.tensor, { { 1, 2 }, { 3 } }))
    assert.matches("not rectangular", error_of(diloco.tensor, { { 1, 2 }, 3 }))
    assert.matches("expected a number", error_of(diloco.tensor, { 1, "x" }))
    assert.matches("at most 4", error_of(diloco.tensor, { { { { { 1 } } } } }))
    assert.matches("at most 4", error_of(diloco.zeros, 1, 1, 1, 1, 1))
    assert.matches("size must be >= 0", error_of(diloco.zeros, 2, -1))
    assert.matches("bad argument #1 to '[%w.]*tensor' %(table, number or Tensor expected, got string%)",
      error_of(diloco.tensor, "abc"))
    assert.matches("number has no integer representation", error_of(diloco.ones, 2.5))
  end)
end)

describe("element access and views", function()
  it("indexes 1-D tensors from 1, with negatives from the end", function()
    local t = diloco.tensor { 10, 20, 30 }
    assert.are.equal(10, t[1])
    assert.are.equal(30, t[3])
    assert.are.equal(30, t[-1])
    assert.are.equal(10, t[-3])
    t[2] = 99
    assert.are.same({ 10, 99, 30 }, t:tolist())
  end)

  it("t[i] of an N-D tensor is a view of row i: writes show up in the parent", function()
    local m = diloco.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    local row = m[2]
    assert.are.same({ 3 }, row.shape)
    assert.are.same({ 4, 5, 6 }, row:tolist())
    row[1] = 40
    row:fill(7)
    assert.are.same({ { 1, 2, 3 }, { 7, 7, 7 } }, m:tolist())
    m[1][3] = -3 -- chained: view, then element write
    assert.are.equal(-3, m:get(1, 3))
  end)

  it("assigning to a row fills it from a number or copies a tensor", function()
    local m = diloco.zeros(2, 2)
    m[1] = 5
    m[2] = diloco.tensor { 8, 9 }
    assert.are.same({ { 5, 5 }, { 8, 9 } }, m:tolist())
  end)

  it("reshape, view and detach share storage; clone does not", function()
    local a = diloco.arange(0, 6)
    local r = a:reshape(2, -1)
    local v = a:view({ 3, 2 })
    local d = a:detach()
    local c = a:clone()
    assert.are.same({ 2, 3 }, r.shape)
    r:set(100, 2, 3)
    assert.are.equal(100, a[6])
    assert.are.equal(100, v:get(3, 2))
    assert.are.equal(100, d[6])
    assert.are.equal(5, c[6])
  end)

  it("get/set take one position per dim; item needs one element", function()
    local t = diloco.zeros(2, 3, 4)
    t:set(1.5, 2, 3, 4)
    assert.are.equal(1.5, t:get(2, 3, 4))
    assert.are.equal(1.5, t:get(-1, -1, -1))
    assert.are.equal(1.5, t:reshape(-1)[24])
    assert.matches("get: 2 indices given for a 3%-dimensional tensor", error_of(t.get, t, 1, 1))
    assert.matches("item: tensor %[2,3,4%] has 24 elements", error_of(t.item, t))
  end)

  it("fill and copy work in place and return the tensor", function()
    local t = diloco.zeros(2, 2)
    assert.are.equal(t, t:fill(3))
    assert.are.same({ { 3, 3 }, { 3, 3 } }, t:tolist())
    assert.are.equal(t, t:copy(diloco.arange(4)))
    assert.are.same({ { 0, 1 }, { 2, 3 } }, t:tolist())
    assert.matches("copy: destination %[2,2%] and source %[3%] differ in size",
      error_of(t.copy, t, diloco.zeros(3)))
  end)

  it("slice is inclusive like string.sub, with negatives from the end", function()
    local t = diloco.tensor { { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }
    assert.are.same({ { 2, 3 }, { 6, 7 } }, t:slice(2, 2, 3):tolist())
    assert.are.same({ { 3, 4 }, { 7, 8 } }, t:slice(2, -2):tolist())
    assert.are.same({ { 5, 6, 7, 8 } }, t:slice(1, 2, 2):tolist())
    assert.are.same({ 2, 0 }, t:slice(2, 3, 2).shape) -- j = i - 1: empty
    assert.matches("slice: positions 2..5 are out of range for axis 2 of size 4",
      error_of(t.slice, t, 2, 2, 5))
  end)

  it("transposes with 1-based axes and concatenates along an axis", function()
    local t = diloco.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, t:transpose(1, 2):tolist())
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, t:transpose():tolist())
    local u = diloco.tensor { { 7, 8, 9 } }
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }, diloco.concat({ t, u }, 1):tolist())
    assert.are.same({ { 1, 2, 3, 1, 2, 3 }, { 4, 5, 6, 4, 5, 6 } }, diloco.concat({ t, t }, -1):tolist())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, diloco.concat({ t }):tolist())
  end)

  it("concatenates more tensors than fit in its small scratch array, with or without an axis", function()
    local many = {}
    for i = 1, 40 do many[i] = diloco.tensor { i } end
    local t = diloco.concat(many)
    assert.are.same({ 40 }, t.shape)
    assert.are.equal(40, t[40])
    assert.are.same({ 40 }, diloco.concat(many, 1).shape)
  end)

  it("raises on out-of-range positions, naming the index and the size", function()
    local v = diloco.tensor { 1, 2, 3 }
    local m = diloco.zeros(2, 3)
    assert.matches("index 4 is out of range for dimension 1 of size 3", error_of(function() return v[4] end))
    assert.matches("index 0 is out of range for dimension 1 of size 3", error_of(function() return v[0] end))
    assert.matches("index %-4 is out of range for dimension 1 of size 3", error_of(function() return v[-4] end))
    assert.matches("index 3 is out of range for dimension 1 of size 2", error_of(function() m[3] = 1 end))
    assert.matches("index 9 is out of range for dimension 2 of size 3", error_of(m.get, m, 1, 9))
    assert.matches("axis 3 is out of range for a 2%-dimensional tensor", error_of(m.sum, m, 3))
    assert.matches("axis 0 is out of range", error_of(m.sum, m, 0))
    assert.matches("cannot index a 0%-dimensional tensor", error_of(function() return diloco.tensor(1)[1] end))
  end)
end)

describe("arithmetic", function()
  local a = diloco.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
  local b = diloco.tensor { { 6, 5, 4 }, { 3, 2, 1 } }
  local row = diloco.tensor { 10, 20, 30 }
  local col = diloco.tensor { { 100 }, { 200 } }

  local function map2(x, y, f)
    local out = {}
    for i = 1, #x do
      out[i] = {}
      for j = 1, #x[1] do out[i][j] = f(x[i][j], y[i][j]) end
    end
    return out
  end
  local A, B = a:tolist(), b:tolist()

  it("combines tensors elementwise", function()
    assert_near(map2(A, B, function(x, y) return x + y end), (a + b):tolist())
    assert_near(map2(A, B, function(x, y) return x - y end), (a - b):tolist())
    assert_near(map2(A, B, function(x, y) return x * y end), (a * b):tolist())
    assert_near(map2(A, B, function(x, y) return x / y end), (a / b):tolist())
    assert_near(map2(A, B, function(x, y) return x + y end), diloco.add(a, b):tolist())
    assert_near(map2(A, B, function(x, y) return x * y end), a:mul(b):tolist())
  end)

  it("broadcasts a row and a column", function()
    assert_near({ { 11, 22, 33 }, { 14, 25, 36 } }, (a + row):tolist())
    assert_near({ { 101, 102, 103 }, { 204, 205, 206 } }, (a + col):tolist())
    assert_near({ { 110, 120, 130 }, { 210, 220, 230 } }, (row + col):tolist())
    assert_near({ { 11, 22, 33 }, { 14, 25, 36 } }, a:bias_add(row):tolist())
    assert.matches("shapes do not broadcast", error_of(function() return a + diloco.zeros(2) end))
  end)

  it("mixes tensors and numbers on either side", function()
    assert_near({ { 3, 4, 5 }, { 6, 7, 8 } }, (a + 2):tolist())
    assert_near({ { 3, 4, 5 }, { 6, 7, 8 } }, (2 + a):tolist())
    assert_near({ { -1, 0, 1 }, { 2, 3, 4 } }, (a - 2):tolist())
    assert_near({ { 9, 8, 7 }, { 6, 5, 4 } }, (10 - a):tolist())
    assert_near({ { 3, 6, 9 }, { 12, 15, 18 } }, (a * 3):tolist())
    assert_near({ { 3, 6, 9 }, { 12, 15, 18 } }, (3 * a):tolist())
    assert_near({ { 0.5, 1, 1.5 }, { 2, 2.5, 3 } }, (a / 2):tolist())
    assert_near({ { 12, 6, 4 }, { 3, 2.4, 2 } }, (12 / a):tolist())
    assert_near({ { 1, 0.5, 1 / 3 }, { 0.25, 0.2, 1 / 6 } }, (1 / a):tolist())
    assert_near({ { -1, -2, -3 }, { -4, -5, -6 } }, (-a):tolist())
    assert_near({ { 1, 4, 9 }, { 16, 25, 36 } }, (a ^ 2):tolist())
    assert_near({ { 1, 4, 9 }, { 16, 25, 36 } }, a:pow(2):tolist())
    assert_near({ { 3, 5, 7 }, { 9, 11, 13 } }, a:affine(2, 1):tolist())
    assert_near({ { -1, -2, -3 }, { -4, -5, -6 } }, a:scale(-1):tolist())
  end)

  it("has every unary op by name, as a method and a module function", function()
    local x = diloco.tensor { -1, 0, 0.5, 2 }
    local X = x:tolist()
    local function each(f) local o = {} for i, v in ipairs(X) do o[i] = f(v) end return o end
    assert_near(each(math.exp), x:exp():tolist())
    assert_near(each(math.abs), x:abs():tolist())
    assert_near(each(function(v) return math.max(v, 0) end), x:relu():tolist())
    assert_near(each(function(v) return -v end), x:neg():tolist())
    assert_near(each(math.sin), diloco.sin(x):tolist())
    assert_near(each(math.cos), x:cos():tolist())
    assert_near(each(function(v) return 1 / (1 + math.exp(-v)) end), x:sigmoid():tolist())
    assert_near(each(function(v) return v / (1 + math.exp(-v)) end), x:silu():tolist())
    local th = function(v) return (math.exp(2 * v) - 1) / (math.exp(2 * v) + 1) end
    assert_near(each(th), x:tanh():tolist())
    assert_near(each(function(v) return 0.5 * v * (1 + th(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3))) end),
      x:gelu():tolist(), 1e-4)
    local p = diloco.tensor { 0.25, 1, 4 }
    assert_near({ 0.5, 1, 2 }, p:sqrt():tolist())
    assert_near({ math.log(0.25), 0, math.log(4) }, p:log():tolist())
  end)

  it("rejects operands that are neither tensors nor numbers", function()
    local t = diloco.ones(2)
    assert.matches("Tensor or number expected, got string", error_of(function() return t + "1" end))
    assert.matches("Tensor or number expected, got table", error_of(function() return {} * t end))
    assert.matches("diloco.Tensor expected, got number", error_of(diloco.matmul, 1, t))
    assert.matches("bad argument #2 to '[%w.]*bias_add' %(diloco.Tensor expected, got no value%)",
      error_of(diloco.bias_add, t))
  end)

  it("does not overload == (identity only)", function()
    local x, y = diloco.ones(2), diloco.ones(2)
    assert.is_false(x == y)
    assert.is_true(x == x)
  end)
end)

describe("reductions", function()
  local t = diloco.tensor { { 1, 5, 3 }, { 4, 2, 6 } }

  it("sum and mean over everything or one axis", function()
    assert.are.equal(21, t:sum():item())
    assert.are.same({}, t:sum().shape)
    assert.are.equal(3.5, t:mean():item())
    assert_near({ 5, 7, 9 }, t:sum(1):tolist())
    assert_near({ 9, 12 }, t:sum(2):tolist())
    assert_near({ { 9 }, { 12 } }, t:sum(-1, true):tolist())
    assert_near({ 3, 4 }, t:mean(2):tolist())
    assert_near({ 9, 12 }, diloco.sum(t, 2):tolist())
  end)

  it("max and argmax; argmax values are 0-based", function()
    assert.are.equal(6, t:max():item())
    assert.are.equal(5, t:argmax():item()) -- flat position of 6, 0-based
    assert_near({ 5, 6 }, t:max(2):tolist())
    assert_near({ 1, 2 }, t:argmax(2):tolist())
    assert_near({ 1, 0, 1 }, t:argmax(1):tolist())
  end)

  it("topk returns values and 0-based indices", function()
    local v, i = t:topk(2)
    assert_near({ { 5, 3 }, { 6, 4 } }, v:tolist())
    assert_near({ { 1, 2 }, { 2, 0 } }, i:tolist())
  end)

  it("softmax rows sum to one and log_softmax is its log", function()
    local s = t:softmax()
    assert_near({ 1, 1 }, s:sum(2):tolist())
    local e = { math.exp(1), math.exp(5), math.exp(3) }
    local z = e[1] + e[2] + e[3]
    assert_near({ e[1] / z, e[2] / z, e[3] / z }, s[1]:tolist())
    assert_near(s:log():tolist(), t:log_softmax():tolist(), 1e-4)
  end)
end)

describe("matmul", function()
  it("an options table whose metamethod frees an operand gives an error, not a dangling pointer", function()
    local a, b = diloco.randn(3, 3), diloco.randn(3, 3)
    local opts = setmetatable({}, { __index = function() a:free(); collectgarbage() end })
    assert.matches("tensor has been freed", error_of(a.matmul, a, b, opts))
  end)

  local function lua_matmul(A, B)
    local C = {}
    for i = 1, #A do
      C[i] = {}
      for j = 1, #B[1] do
        local s = 0
        for k = 1, #B do s = s + A[i][k] * B[k][j] end
        C[i][j] = s
      end
    end
    return C
  end
  local function transpose(A)
    local T = {}
    for j = 1, #A[1] do
      T[j] = {}
      for i = 1, #A do T[j][i] = A[i][j] end
    end
    return T
  end

  it("agrees with a hand-written triple loop", function()
    diloco.seed(7)
    local a, b = diloco.randn(5, 4), diloco.randn(4, 3)
    local want = lua_matmul(a:tolist(), b:tolist())
    assert_near(want, a:matmul(b):tolist(), 1e-4)
    assert_near(want, diloco.matmul(a, b):tolist(), 1e-4)
  end)

  it("takes transposes as flags or as an options table", function()
    local a, b = diloco.randn(4, 5), diloco.randn(3, 4)
    local want = lua_matmul(transpose(a:tolist()), transpose(b:tolist()))
    assert_near(want, a:matmul(b, true, true):tolist(), 1e-4)
    assert_near(want, a:matmul(b, { ta = true, tb = true }):tolist(), 1e-4)
    local c = diloco.randn(5, 4)
    assert_near(lua_matmul(c:tolist(), transpose(b:tolist())), c:matmul(b, { tb = true }):tolist(), 1e-4)
  end)

  it("batches over leading dims", function()
    local a, b = diloco.randn(2, 3, 4), diloco.randn(4, 2)
    local c = a:matmul(b)
    assert.are.same({ 2, 3, 2 }, c.shape)
    assert_near(lua_matmul(a[2]:tolist(), b:tolist()), c[2]:tolist(), 1e-4)
  end)

  it("reports mismatched inner dimensions with both shapes", function()
    local a, b = diloco.zeros(4, 3), diloco.zeros(2, 5)
    local ok, err = pcall(function() return a:matmul(b) end) -- called from Lua: has a position
    assert.is_false(ok)
    assert.matches("^.-:%d+: matmul: %[4,3%] x %[2,5%]: inner dimensions 3 and 2 differ$", err)
    assert.has_error(function() return a:matmul(b) end, "matmul: [4,3] x [2,5]: inner dimensions 3 and 2 differ")
  end)
end)

describe("tostring", function()
  it("prints small tensors in full", function()
    assert.are.equal("Tensor[2,3] {{1, 2, 3}, {4, 5, 6}}", tostring(diloco.tensor { { 1, 2, 3 }, { 4, 5, 6 } }))
    assert.are.equal("Tensor[3] {0.5, -1, 2}", tostring(diloco.tensor { 0.5, -1, 2 }))
    assert.are.equal("Tensor[] 3", tostring(diloco.tensor(3)))
    assert.are.equal("Tensor[0] {}", tostring(diloco.zeros(0)))
  end)

  it("prints an empty tensor with a huge leading dim without walking it", function()
    assert.are.equal("Tensor[2,0] {{}, {}}", tostring(diloco.zeros(2, 0)))
    local t = diloco.zeros(1 << 40, 0) -- 0 elements, but 2^40 empty rows
    assert.are.equal("Tensor[1099511627776,0] {...}", tostring(t))
  end)

  it("tolist refuses an empty tensor that would need billions of empty tables", function()
    assert.are.same({ {}, {} }, diloco.zeros(2, 0):tolist())
    local t = diloco.zeros(1 << 40, 0)
    assert.matches("tolist: .*%[1099511627776,0%]", error_of(t.tolist, t))
  end)

  it("prints the shape and the first values of large tensors", function()
    local s = tostring(diloco.arange(0, 1000):reshape(10, 100))
    assert.are.equal("Tensor[10,100] {0, 1, 2, 3, 4, 5, ...}", s)
  end)

  it("prints a freed tensor without raising", function()
    local t = diloco.ones(2)
    t:free()
    assert.are.equal("Tensor (freed)", tostring(t))
  end)
end)

describe("random numbers", function()
  it("the same seed gives the same randn", function()
    diloco.seed(1234)
    local a = diloco.randn(3, 4):tolist()
    local b = diloco.randn(3, 4):tolist()
    diloco.seed(1234)
    assert.are.same(a, diloco.randn(3, 4):tolist())
    assert.are.same(b, diloco.randn(3, 4):tolist())
    assert.are_not.same(a, b)
    diloco.seed(1235)
    assert.are_not.same(a, diloco.randn(3, 4):tolist())
  end)

  it("a Generator is an independent stream", function()
    local g1, g2 = diloco.Generator(99), diloco.Generator(99)
    local x = g1:randn(8):tolist()
    diloco.randn(100) -- the module generator does not disturb g2
    assert.are.same(x, g2:randn(8):tolist())
    assert.are.same(x, g1:seed(99):randn(8):tolist())
    local u = g1:rand({ 4 }, { lo = -1, hi = 1 })
    for _, v in ipairs(u:tolist()) do assert.is_true(v >= -1 and v < 1) end
  end)

  it("dropout is reproducible from a generator and scales the kept values", function()
    local x = diloco.ones(1000)
    local d1 = x:dropout(0.5, diloco.Generator(5)):tolist()
    local d2 = x:dropout(0.5, diloco.Generator(5)):tolist()
    assert.are.same(d1, d2)
    local zeros = 0
    for _, v in ipairs(d1) do
      assert.is_true(v == 0 or close(v, 2))
      if v == 0 then zeros = zeros + 1 end
    end
    assert.is_true(zeros > 400 and zeros < 600)
    assert.matches("dropout: p = 1: must be in %[0, 1%)", error_of(x.dropout, x, 1))
  end)
end)

describe("nn ops through the binding", function()
  it("cross_entropy of uniform logits is log(V), and ignore_index skips rows", function()
    local logits = diloco.zeros(3, 4)
    assert(close(math.log(4), logits:cross_entropy(diloco.tensor { 0, 1, 3 }):item()))
    local l2 = diloco.tensor { { 0, 0, 0, 0 }, { 10, 0, 0, 0 } }
    assert(close(math.log(4), l2:cross_entropy(diloco.tensor { 2, 0 }, 0):item()))
    assert.matches("cross_entropy", error_of(logits.cross_entropy, logits, diloco.tensor { 0, 1, 4 }))
  end)

  it("layernorm and rmsnorm normalise the last dim", function()
    local x = diloco.tensor { { 1, 2, 3, 4 } }
    local y = x:layernorm():tolist()[1]
    local m, v = 0, 0
    for _, e in ipairs(y) do m = m + e / 4 end
    for _, e in ipairs(y) do v = v + (e - m) ^ 2 / 4 end
    assert(close(m, 0, 1e-5) and close(v, 1, 1e-3))
    local w, b = diloco.full({ 4 }, 2), diloco.full({ 4 }, 1)
    assert_near((x:layernorm() * 2 + 1):tolist(), x:layernorm(w, b, 1e-5):tolist(), 1e-5)
    local r = x:rmsnorm(nil, 1e-6):tolist()[1]
    local rms = math.sqrt((1 + 4 + 9 + 16) / 4)
    assert_near({ 1 / rms, 2 / rms, 3 / rms, 4 / rms }, r, 1e-4)
  end)

  it("embedding, index_select, gather and index_add take 0-based index values", function()
    local w = diloco.tensor { { 0, 1 }, { 10, 11 }, { 20, 21 } }
    local ids = diloco.tensor { 2, 0 }
    assert.are.same({ { 20, 21 }, { 0, 1 } }, w:embedding(ids):tolist())
    assert.are.same({ { 20, 21 }, { 0, 1 } }, diloco.index_select(w, ids):tolist())
    assert.are.same({ { 1, 0 }, { 11, 11 }, { 20, 21 } },
      w:gather(diloco.tensor { { 1, 0 }, { 1, 1 }, { 0, 1 } }):tolist())
    local base = diloco.zeros(3, 2)
    local added = base:index_add(diloco.tensor { 1, 1 }, diloco.ones(2, 2))
    assert.are.same({ { 0, 0 }, { 2, 2 }, { 0, 0 } }, added:tolist())
    assert.matches("index 3", error_of(w.embedding, w, diloco.tensor { 3 }))
  end)

  it("attention keeps the [B, T, C] shape and is causal at the first position", function()
    local qkv = diloco.randn(2, 5, 12) -- C = 4, heads = 2
    local out = qkv:attention(2)
    assert.are.same({ 2, 5, 4 }, out.shape)
    -- position 1 only attends to itself: its output is its own v
    assert_near(qkv[1][1]:slice(1, 9, 12):tolist(), out[1][1]:tolist(), 1e-5)
  end)
end)

describe("lifetime", function()
  it("free() releases, and every later use says the tensor has been freed", function()
    local t = diloco.ones(2, 2)
    t:free()
    assert.matches("tensor has been freed", error_of(function() return t.shape end))
    assert.matches("tensor has been freed", error_of(function() return t[1] end))
    assert.matches("tensor has been freed", error_of(function() return t + 1 end))
    assert.matches("tensor has been freed", error_of(function() return t:sum() end))
    assert.matches("tensor has been freed", error_of(function() return diloco.ones(2):add(t) end))
    assert.matches("tensor has been freed", error_of(diloco.concat, { t }))
  end)

  it("a second free() is harmless, and so is the collector afterwards", function()
    local t = diloco.ones(3)
    t:free()
    t:free()
    t = nil
    collectgarbage()
    collectgarbage()
  end)

  it("freeing one tensor leaves views of the same storage valid", function()
    local m = diloco.tensor { { 1, 2 }, { 3, 4 } }
    local row = m[2]
    m:free()
    collectgarbage()
    assert.are.same({ 3, 4 }, row:tolist())
  end)

  it("local t <close> releases at the end of the scope", function()
    local escaped
    do
      local t <close> = diloco.ones(4)
      escaped = t
      assert.are.equal(4, t:sum():item())
    end
    assert.are.equal("Tensor (freed)", tostring(escaped))
    assert.matches("tensor has been freed", error_of(function() return escaped:sum() end))
  end)

  it("a loop of large temporaries does not pile up memory", function()
    collectgarbage()
    local base = diloco.bytes_live()
    local x = diloco.zeros(1024, 1024) -- 4 MiB
    for _ = 1, 200 do -- 800 MiB of temporaries in total, never freed by hand
      local y = x + 1
      y = y * 2
    end
    -- The GC hints keep at most a few tens of MiB of garbage alive.
    assert.is_true(diloco.bytes_live() - base < 128 * 2 ^ 20,
      ("%d MiB still alive"):format((diloco.bytes_live() - base) // 2 ^ 20))
  end)
end)

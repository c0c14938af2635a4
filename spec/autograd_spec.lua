-- Reverse-mode autograd as seen from Lua: gradients against hand-derived formulas
-- and finite differences, accumulation, grad mode, graph lifetime, leaf rules.
local diloco = require "diloco"
local H = require "spec.helpers"
local close = H.close
local assert_near = H.assert_near
local error_of = H.error_of

describe("gradients", function()
  it("sum(w * w) has gradient 2w", function()
    local w = diloco.tensor({ { 1, -2 }, { 3, 0.5 } }):requires_grad_()
    assert.is_nil(w.grad)
    local loss = (w * w):sum()
    assert.are.equal("sum_all", loss.op)
    loss:backward()
    assert_near({ { 2, -4 }, { 6, 1 } }, w.grad:tolist())
  end)

  it("a linear layer with cross-entropy matches the hand-derived gradient", function()
    -- logits = x W^T + b; loss = mean_n -log softmax(logits_n)[y_n]
    -- dlogits = (softmax - onehot(y)) / N;  dW = dlogits^T x;  db = sum_n dlogits
    local X = { { 1, 2, -1 }, { 0.5, -1, 2 } }
    local Wt = { { 0.1, -0.2, 0.3 }, { 0.0, 0.4, -0.1 }, { -0.3, 0.2, 0.2 }, { 0.2, 0.1, 0.0 } }
    local Bt = { 0.05, -0.05, 0.1, 0 }
    local Y = { 2, 0 } -- class ids are 0-based values
    local x = diloco.tensor(X)
    local W = diloco.tensor(Wt):requires_grad_(true)
    local b = diloco.tensor(Bt):requires_grad_(true)
    local loss = x:matmul(W, false, true):bias_add(b):cross_entropy(diloco.tensor(Y))
    loss:backward()

    local N, V, C = #X, #Wt, #X[1]
    local dW, db, want_loss = {}, {}, 0
    for v = 1, V do
      db[v] = 0
      dW[v] = {}
      for c = 1, C do dW[v][c] = 0 end
    end
    for n = 1, N do
      local z, m = {}, -math.huge
      for v = 1, V do
        z[v] = Bt[v]
        for c = 1, C do z[v] = z[v] + X[n][c] * Wt[v][c] end
        m = math.max(m, z[v])
      end
      local s = 0
      for v = 1, V do s = s + math.exp(z[v] - m) end
      want_loss = want_loss + (m + math.log(s) - z[Y[n] + 1]) / N
      for v = 1, V do
        local d = (math.exp(z[v] - m) / s - (v == Y[n] + 1 and 1 or 0)) / N
        db[v] = db[v] + d
        for c = 1, C do dW[v][c] = dW[v][c] + d * X[n][c] end
      end
    end
    assert_near(want_loss, loss:item(), 1e-5)
    assert_near(dW, W.grad:tolist(), 1e-5)
    assert_near(db, b.grad:tolist(), 1e-5)
    assert.is_nil(x.grad) -- x never asked for one
  end)

  it("agrees with central finite differences through several ops", function()
    diloco.seed(3)
    local W = diloco.randn(3, 4, { std = 0.5 })
    local g = diloco.randn(2, 4)
    local function f(x)
      return (x:matmul(W):tanh() * g):sum() + x:pow(2):mean()
    end
    local x = diloco.randn(2, 3):requires_grad_()
    f(x):backward()
    local analytic = x.grad:tolist()
    local eps = 1e-2
    for i = 1, 2 do
      for j = 1, 3 do
        local xp, xm = x:detach():clone(), x:detach():clone()
        xp:set(xp:get(i, j) + eps, i, j)
        xm:set(xm:get(i, j) - eps, i, j)
        local num = (f(xp):item() - f(xm):item()) / (2 * eps)
        assert(close(num, analytic[i][j], 2e-2),
          ("d/dx[%d][%d]: numeric %.5g vs analytic %.5g"):format(i, j, num, analytic[i][j]))
      end
    end
  end)

  it("backward of a non-scalar takes its gradient explicitly", function()
    local x = diloco.tensor({ 1, 2, 3 }):requires_grad_()
    local y = x * 3
    assert.matches("backward: root has shape %[3%]", error_of(y.backward, y))
    y:backward(diloco.tensor { 1, 10, 100 })
    assert_near({ 3, 30, 300 }, x.grad:tolist())
  end)

  it("grads of non-leaves are kept only when asked with retain_grad", function()
    local x = diloco.tensor({ 1, 2 }):requires_grad_()
    local h = (x * 2):retain_grad()
    local k = x * 5
    ;((h + k) * h):sum():backward()
    -- h = 2x = {2, 4}, k = 5x = {5, 10}; d/dh sum((h + k) h) = 2h + k = {9, 18}
    assert_near({ 9, 18 }, h.grad:tolist())
    assert.is_nil(k.grad)
    -- d/dx = 2 (2h + k) + 5 h = {28, 56}
    assert_near({ 28, 56 }, x.grad:tolist())
  end)
end)

describe("gradient accumulation", function()
  it("adds up across backward calls until zero_grad", function()
    local w = diloco.tensor({ 1, 2 }):requires_grad_()
    ;(w * w):sum():backward()
    ;(w * w):sum():backward()
    assert_near({ 4, 8 }, w.grad:tolist())
    assert.are.equal(w, w:zero_grad())
    assert_near({ 0, 0 }, w.grad:tolist())
    ;(w * 3):sum():backward()
    assert_near({ 3, 3 }, w.grad:tolist())
  end)

  it("t.grad shares the gradient buffer", function()
    local w = diloco.tensor({ 1, 2 }):requires_grad_()
    ;(w * w):sum():backward()
    local g = w.grad
    w:zero_grad()
    assert_near({ 0, 0 }, g:tolist())
    g:fill(7)
    assert_near({ 7, 7 }, w.grad:tolist())
  end)
end)

describe("grad mode", function()
  it("no_grad records no graph and returns fn's results", function()
    local w = diloco.ones(2):requires_grad_()
    local y, extra = diloco.no_grad(function(a, k)
      assert.is_false(diloco.grad_enabled())
      return a * k, "x"
    end, w, 3)
    assert.are.equal("x", extra)
    assert.is_false(y.requires_grad)
    assert.are.equal("none", y.op)
    assert.matches("does not require grad", error_of(function() y:sum():backward() end))
    assert.is_true(diloco.grad_enabled())
    assert.is_true((w * 3).requires_grad)
  end)

  it("no_grad restores the previous mode when fn raises, and rethrows the error", function()
    local marker = {}
    local ok, err = pcall(diloco.no_grad, function() error(marker) end)
    assert.is_false(ok)
    assert.are.equal(marker, err) -- the very same error object
    assert.is_true(diloco.grad_enabled())
    -- nested inside a disabled region, it restores "disabled"
    diloco.set_grad_enabled(false)
    pcall(diloco.no_grad, function() error("boom") end)
    assert.is_false(diloco.grad_enabled())
    diloco.set_grad_enabled(true)
  end)

  it("set_grad_enabled returns the previous setting", function()
    assert.is_true(diloco.set_grad_enabled(false))
    assert.is_false(diloco.set_grad_enabled(false))
    local w = diloco.ones(2):requires_grad_()
    assert.is_false((w + 1).requires_grad)
    assert.is_false(diloco.set_grad_enabled(true))
    assert.is_true((w + 1).requires_grad)
  end)

  it("detach cuts the history", function()
    local w = diloco.ones(2):requires_grad_()
    local d = (w * 2):detach()
    assert.is_false(d.requires_grad)
    assert.is_true(d.is_leaf)
  end)
end)

describe("the graph", function()
  it("a second backward without retain_graph fails; with retain_graph it works", function()
    local w = diloco.tensor({ 1, 2 }):requires_grad_()
    local loss = (w * w):sum()
    loss:backward()
    assert.has_error(function() loss:backward() end,
      "backward: the graph was already freed by an earlier backward; pass retain_graph to backpropagate through it twice")
    w:zero_grad()
    local loss2 = (w * w):sum()
    loss2:backward(true) -- retain_graph
    loss2:backward(nil, true)
    assert_near({ 4, 8 }, w.grad:tolist())
  end)

  it("reports leaves and the op that made each tensor", function()
    local w = diloco.ones(2, 2):requires_grad_()
    local y = w:matmul(w):relu()
    assert.is_true(w.is_leaf)
    assert.are.equal("none", w.op)
    assert.is_false(y.is_leaf)
    assert.are.equal("unary", y.op)
    assert.is_true(y.requires_grad)
  end)

  it("requires_grad can be changed on a leaf only", function()
    local w = diloco.ones(2)
    assert.is_false(w.requires_grad)
    w.requires_grad = true
    assert.is_true(w.requires_grad)
    local y = w * w
    assert.has_error(function() y:requires_grad_(false) end,
      "requires_grad: only leaf tensors can be changed; this one is the result of mul")
    assert.matches("only leaf tensors", error_of(function() y.requires_grad = false end))
    assert.matches("cannot set field 'foo' of a Tensor", error_of(function() w.foo = 1 end))
    w:requires_grad_(false)
    assert.is_false(w.requires_grad)
  end)

  it("randn can create a leaf that requires grad", function()
    local w = diloco.randn(3, { requires_grad = true })
    assert.is_true(w.requires_grad)
    assert.is_true(w.is_leaf)
  end)
end)

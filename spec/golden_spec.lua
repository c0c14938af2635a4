-- Golden test: a tiny GPT against PyTorch 1.13 (scripts/reference/golden_gpt.py wrote the
-- fixtures).  Same initial parameters and batch; for 3 steps of backward ->
-- clip_grad_norm(1.0) -> AdamW, the loss, the step-0 logits, every parameter gradient
-- and the final parameters agree to 1e-4 relative (max |ours - torch| / max |torch|
-- per tensor).  Everything runs at one and at two compute threads: the engine's own
-- kernels (norms, attention, cross-entropy, AdamW...) split across threads above a work
-- threshold; ctest also runs this spec with DILOCO_PAR_GRAIN=1 (lua_golden_spec_split),
-- which splits even this tiny model's kernels.
local diloco = require "diloco"

local TOL = 1e-4

local function rel_err(a, b)
  local x, y = a:tolist(), b:tolist()
  local function flat(t, acc)
    if type(t) == "number" then acc[#acc + 1] = t; return acc end
    for _, v in ipairs(t) do flat(v, acc) end
    return acc
  end
  x, y = flat(x, {}), flat(y, {})
  assert.are.equal(#y, #x)
  local diff, scale = 0, 0
  for i = 1, #x do
    diff = math.max(diff, math.abs(x[i] - y[i]))
    scale = math.max(scale, math.abs(y[i]))
  end
  return diff / math.max(scale, 1e-30)
end

for _, threads in ipairs { 1, 2 } do
  for _, variant in ipairs { "tied", "untied" } do
    describe(("GPT golden values vs PyTorch (%s head, %d thread%s)"):format(variant, threads,
      threads > 1 and "s" or ""), function()
      local fx, meta = diloco.load_safetensors("ctest/fixtures/gpt_golden_" .. variant .. ".safetensors")
      assert(fx, meta)
      local cfg = {
        vocab = tonumber(meta.vocab), ctx = tonumber(meta.ctx), dim = tonumber(meta.dim),
        layers = tonumber(meta.layers), heads = tonumber(meta.heads), mlp_ratio = tonumber(meta.mlp_ratio),
        tied = meta.tied == "1", seed = 0,
      }
      local model = diloco.nn.GPT(cfg)
      local plist = model:parameters()

      it("has PyTorch's parameter names and shapes", function()
        local n = 0
        for _, p in ipairs(plist) do
          local ref = fx["init." .. p[1]]
          assert.is_truthy(ref, "PyTorch has no parameter " .. p[1])
          assert.are.same(ref.shape, p[2].shape)
          n = n + 1
        end
        local m = 0
        for k in pairs(fx) do
          if k:match("^init%.") then m = m + 1 end
        end
        assert.are.equal(m, n)
      end)

      it("matches loss, logits, gradients and AdamW updates for 3 steps", function()
        local saved = diloco.num_threads()
        finally(function() diloco.set_num_threads(saved) end)
        diloco.set_num_threads(threads)
        for _, p in ipairs(plist) do p[2]:copy(fx["init." .. p[1]]) end
        local params = diloco.Params(plist)
        local opt = diloco.Optimizer(params, { kind = "adamw", lr = tonumber(meta.lr), beta1 = tonumber(meta.beta1),
          beta2 = tonumber(meta.beta2), eps = tonumber(meta.eps), weight_decay = tonumber(meta.weight_decay) })
        local x, y = fx.x, fx.y
        for step = 0, tonumber(meta.steps) - 1 do
          params:zero_grad()
          local loss = model:loss(x, y)
          if step == 0 then
            local logits = diloco.no_grad(function() return model:forward(x) end)
            assert.is_true(rel_err(logits, fx["step0.logits"]) < TOL, "step-0 logits")
          end
          assert.is_true(rel_err(loss, fx["step" .. step .. ".loss"]) < TOL,
            string.format("step %d loss %.7f vs %.7f", step, loss:item(), fx["step" .. step .. ".loss"]:item()))
          loss:backward()
          for _, p in ipairs(plist) do
            local e = rel_err(p[2].grad, fx["step" .. step .. ".grad." .. p[1]])
            assert.is_true(e < TOL, string.format("step %d grad of %s: rel err %.2e", step, p[1], e))
          end
          local norm = params:clip_grad_norm(tonumber(meta.clip))
          assert.is_true(math.abs(norm - fx["step" .. step .. ".grad_norm"]:item()) <
            TOL * fx["step" .. step .. ".grad_norm"]:item())
          opt:step(tonumber(meta.lr))
        end
        for _, p in ipairs(plist) do
          local e = rel_err(p[2], fx["final." .. p[1]])
          assert.is_true(e < TOL, string.format("final %s: rel err %.2e", p[1], e))
        end
      end)
    end)
  end
end

-- diloco/nn/models.lua: whole models over the layers of diloco/nn.lua: GPT (byte-
-- level language model, optionally mixture-of-experts), ViT (image classifier over
-- patches) and MLPClassifier.  Loaded by nn.lua, which passes itself in.
local diloco = require "diloco"

return function(nn)
  local U = nn._util
  local raise, check_opts, check_divides = U.raise, U.check_opts, U.check_divides
  local class, Linear, Embedding, Block = U.defclass, nn.Linear, nn.Embedding, nn.Block
  local sqrt, floor = math.sqrt, math.floor

  -- o, the checked options of the model fn, once they give seed or rng but not both
  -- (the last check of every model's options function)
  local function one_rng(fn, o)
    if o.seed ~= nil and o.rng ~= nil then raise(fn .. ": give seed or rng, not both") end
    return o
  end

  -- A model's constructor starts here: its options checked (options: the model's
  -- options function) and its rng: an explicit Generator, or one seeded from opts.seed,
  -- or nil (the module generator).
  local function options_rng(options, opts)
    local o = options(opts)
    if o.seed ~= nil then return o, diloco.Generator(o.seed) end
    return o, o.rng
  end

  local function as_tensor(v)
    if diloco.is_tensor(v) then return v end
    return diloco.tensor(v)
  end

  -- The classifiers' loss(x, y [B] class ids) -> loss, loss (the cross-entropy twice,
  -- as GPT returns total and cross-entropy), logits
  local function classifier_loss(self, x, y)
    local logits = self:forward(x)
    local l = logits:cross_entropy(as_tensor(y))
    return l, l, logits
  end

  -- -------------------------------------------------------------------------
  -- GPT
  -- -------------------------------------------------------------------------

  -- GPT{vocab = 256, ctx = 64, dim = 128, layers = 4, heads = 4, tied = true,
  -- mlp_ratio = 4, norm = "layernorm", act = "gelu", moe = nil | {experts = 4,
  -- top_k = 2, aux_weight = 0.01, act}, std = 0.02, seed | rng}.
  -- Children: wte, wpe, blocks.0 .. blocks.{layers-1}, ln_f[, head].  The residual
  -- projections (attn.proj, mlp.proj / every expert's proj) start at
  -- std / sqrt(2 layers) (GPT-2).
  local GPT = class("GPT")

  local GPT_SCHEMA = {
    vocab = { "posint", 256 }, ctx = { "posint", 64 }, dim = { "posint", 128 },
    layers = { "posint", 4 }, heads = { "posint", 4 }, tied = { "boolean", true },
    mlp_ratio = { "posnum", 4 }, norm = { U.NORM_NAMES, "layernorm" }, act = { U.ACTS, "gelu" },
    moe = { "table" }, std = { "nonneg", 0.02 }, seed = { "int" }, rng = { "generator" },
  }

  -- The checked options of GPT{...} (defaults filled, moe normalised), or a raise
  -- naming the bad one.  Allocates nothing: diloco.recipe and diloco.estimate use it
  -- before a model is built.
  local function gpt_options(opts)
    local o = check_opts("GPT", opts, GPT_SCHEMA)
    check_divides("GPT", o.heads, o.dim)
    U.ratio_width("GPT", o.dim, o.mlp_ratio)
    if o.moe then
      local moe = check_opts("GPT: moe", o.moe, { experts = { "posint", 4 }, top_k = { "posint", 2 },
        aux_weight = { "nonneg", 0.01 }, act = { U.ACTS } })
      if moe.top_k > moe.experts then
        raise(("GPT: moe.top_k = %d exceeds moe.experts = %d"):format(moe.top_k, moe.experts))
      end
      o.moe = moe
    end
    return one_rng("GPT", o)
  end

  function GPT:_init(opts)
    local o, rng = options_rng(gpt_options, opts)
    local moe = o.moe
    for k, v in pairs(o) do
      if k ~= "rng" and k ~= "moe" then self[k] = v end
    end
    self.moe = moe
    self.aux_weight = moe and moe.aux_weight or 0
    local dim, proj_std = o.dim, o.std / sqrt(2 * o.layers)
    self:_child("wte", Embedding(o.vocab, dim, { std = o.std, rng = rng }))
    self:_child("wpe", Embedding(o.ctx, dim, { std = o.std, rng = rng }))
    self.blocks = {}
    for l = 1, o.layers do
      self.blocks[l] = self:_child("blocks." .. (l - 1), Block(dim, o.heads, {
        mlp_ratio = o.mlp_ratio, norm = o.norm, act = o.act, moe = moe, causal = true,
        std = o.std, proj_std = proj_std, rng = rng }), false)
    end
    self:_child("ln_f", U.NORMS[o.norm](dim))
    if not o.tied then
      self:_child("head", Linear(dim, o.vocab, { bias = false, std = o.std, rng = rng }))
    end
    self._pos = {} -- T -> arange(T), built once per length
  end

  -- idx [B, T] (or [T], or a nested Lua table) of token ids -> logits [B*T, vocab]
  function GPT:forward(idx)
    idx = as_tensor(idx)
    local nd = idx.ndim
    if nd == 1 then
      idx = idx:reshape(1, -1)
    elseif nd ~= 2 then
      raise(("GPT: idx has %d dimensions, expected [B, T] token ids"):format(nd))
    end
    local B, T = idx:size(1), idx:size(2)
    if T > self.ctx then
      raise(("GPT: sequence length T = %d exceeds ctx = %d"):format(T, self.ctx))
    end
    local pos = self._pos[T]
    if not pos then
      pos = diloco.arange(T)
      self._pos[T] = pos
    end
    local x = self.wte.weight:embedding(idx) + self.wpe.weight:embedding(pos)
    local blocks = self.blocks
    for l = 1, #blocks do x = blocks[l]:forward(x) end
    x = self.ln_f:forward(x):reshape(B * T, self.dim)
    if self.head then return self.head:forward(x) end
    return x:matmul(self.wte.weight, false, true)
  end

  -- loss(idx [B, T], targets [B, T] or [B*T]) -> loss, cross_entropy (scalars),
  -- logits [B*T, vocab].  With MoE, loss = cross_entropy + aux_weight * the sum of
  -- the blocks' aux losses; otherwise loss is cross_entropy itself.
  function GPT:loss(idx, targets)
    local logits = self:forward(idx)
    targets = as_tensor(targets)
    if targets.ndim ~= 1 then targets = targets:reshape(-1) end
    local ce = logits:cross_entropy(targets)
    if not self.moe then return ce, ce, logits end
    local aux = self.blocks[1].moe.aux_loss
    for l = 2, #self.blocks do aux = aux + self.blocks[l].moe.aux_loss end
    return ce + aux:scale(self.aux_weight), ce, logits
  end

  -- generate(prompt, n, {temperature = 1, top_k = nil, rng = nil}) -> the n new ids.
  -- prompt: a non-empty Lua array of token ids.  Runs without grad in eval mode (the
  -- mode is restored); the context is cropped to the last ctx tokens.  Sampling is
  -- Gumbel-max over the (top-k) logits / temperature: exact softmax sampling with
  -- tensor ops only.  temperature = 0 is greedy.
  function GPT:generate(prompt, n, opts)
    local o = check_opts("GPT:generate", opts, { temperature = { "nonneg", 1 }, top_k = { "posint" },
      rng = { "generator" } })
    if type(prompt) ~= "table" or #prompt == 0 then
      raise(("GPT:generate: prompt = %s: expected a non-empty array of token ids"):format(U.show(prompt)))
    end
    n = U.check_arg("GPT:generate", "n", n, "int")
    if n < 0 then raise(("GPT:generate: n = %d: expected n >= 0"):format(n)) end
    if o.top_k and o.top_k > self.vocab then
      raise(("GPT:generate: top_k = %d exceeds vocab = %d"):format(o.top_k, self.vocab))
    end
    local ids = {}
    for i, v in ipairs(prompt) do
      local t = math.type(v) and math.tointeger(v)
      if not t or t < 0 or t >= self.vocab then
        raise(("GPT:generate: prompt[%d] = %s: expected an integer token id in [0, %d)"):format(
          i, U.show(v), self.vocab))
      end
      ids[i] = t
    end
    local rng, temp, top_k, ctx = o.rng, o.temperature, o.top_k, self.ctx
    local was_training = self.training
    self:eval()
    local out = {}
    local ok, err = pcall(diloco.no_grad, function()
      for _ = 1, n do
        local first = math.max(1, #ids - ctx + 1)
        local window = table.move(ids, first, #ids, 1, {})
        local logits = self:forward(diloco.tensor({ window }))
        local last = logits[#window] -- [vocab], a view of the last row
        local tok
        if temp == 0 then
          tok = floor(last:argmax():item())
        else
          local l, cand = last, nil
          if top_k then l, cand = last:topk(top_k) end
          local u = rng and rng:rand(l.numel) or diloco.rand(l.numel)
          local j = floor((l:scale(1 / temp) - (-u:log()):log()):argmax():item())
          tok = cand and floor(cand[j + 1]) or j
        end
        ids[#ids + 1] = tok
        out[#out + 1] = tok
      end
    end)
    self:train(was_training)
    if not ok then error(err, 0) end
    return out
  end

  function GPT:extra_repr()
    local s = ("vocab=%d, ctx=%d, dim=%d, layers=%d, heads=%d, tied=%s, norm=%s"):format(
      self.vocab, self.ctx, self.dim, self.layers, self.heads, tostring(self.tied), self.norm)
    if self.moe then
      s = s .. (", moe={experts=%d, top_k=%d}"):format(self.moe.experts, self.moe.top_k)
    end
    return s
  end

  -- -------------------------------------------------------------------------
  -- ViT
  -- -------------------------------------------------------------------------

  -- ViT{image = 28, patch = 4, channels = 1, dim = 64, layers = 4, heads = 4,
  -- classes = 10, mlp_ratio = 2, norm = "layernorm", act = "gelu", std = 0.02,
  -- seed | rng}.  Children: patch (Linear channels*patch^2 -> dim), pos (Embedding
  -- (image/patch)^2 x dim, added as a whole), blocks.0.. (non-causal), ln_f, head
  -- (Linear dim -> classes).  Input [B, channels*image*image] (channel-major, or any
  -- shape with that many elements per row); output logits [B, classes] from the mean
  -- over patch tokens.
  local ViT = class("ViT")

  local VIT_SCHEMA = {
    image = { "posint", 28 }, patch = { "posint", 4 }, channels = { "posint", 1 }, dim = { "posint", 64 },
    layers = { "posint", 4 }, heads = { "posint", 4 }, classes = { "posint", 10 },
    mlp_ratio = { "posnum", 2 }, norm = { U.NORM_NAMES, "layernorm" }, act = { U.ACTS, "gelu" },
    std = { "nonneg", 0.02 }, seed = { "int" }, rng = { "generator" },
  }

  local function vit_options(opts)
    local o = check_opts("ViT", opts, VIT_SCHEMA)
    if o.image % o.patch ~= 0 then
      raise(("ViT: patch = %d does not divide image = %d"):format(o.patch, o.image))
    end
    check_divides("ViT", o.heads, o.dim)
    U.ratio_width("ViT", o.dim, o.mlp_ratio)
    return one_rng("ViT", o)
  end

  function ViT:_init(opts)
    local o, rng = options_rng(vit_options, opts)
    self.image, self.patch_size, self.channels, self.dim = o.image, o.patch, o.channels, o.dim
    self.layers, self.heads, self.classes, self.norm = o.layers, o.heads, o.classes, o.norm
    self.grid = o.image // o.patch
    self.tokens = self.grid * self.grid
    self.pixels = o.channels * o.image * o.image
    local dim = o.dim
    self:_child("patch", Linear(o.channels * o.patch * o.patch, dim, { std = o.std, rng = rng }))
    self:_child("pos", Embedding(self.tokens, dim, { std = o.std, rng = rng }))
    self.blocks = {}
    local proj_std = o.std / sqrt(2 * o.layers)
    for l = 1, o.layers do
      self.blocks[l] = self:_child("blocks." .. (l - 1), Block(dim, o.heads, {
        mlp_ratio = o.mlp_ratio, norm = o.norm, act = o.act, causal = false, std = o.std,
        proj_std = proj_std, rng = rng }), false)
    end
    self:_child("ln_f", U.NORMS[o.norm](dim))
    self:_child("head", Linear(dim, o.classes, { std = o.std, rng = rng }))
  end

  -- x [B, channels*image*image] -> [B, tokens, channels*patch*patch]: for each image
  -- row of patches, [p, g, p] -> [g, p, p] (one transpose of a 4-D view).
  function ViT:patchify(x)
    local B = x:size(1)
    if x.numel ~= B * self.pixels then
      raise(("ViT: input has %d values per image, expected channels*image*image = %d"):format(
        x.numel // B, self.pixels))
    end
    local g, p, c = self.grid, self.patch_size, self.channels
    local h = x:reshape(B * c * g, p, g, p):transpose(2, 3)
    if c == 1 then return h:reshape(B, g * g, p * p) end
    return h:reshape(B, c, g * g, p * p):transpose(2, 3):reshape(B, g * g, c * p * p)
  end

  function ViT:forward(x)
    x = as_tensor(x)
    local h = self.patch:forward(self:patchify(x)) + self.pos.weight
    local blocks = self.blocks
    for l = 1, #blocks do h = blocks[l]:forward(h) end
    return self.head:forward(self.ln_f:forward(h):mean(2))
  end

  ViT.loss = classifier_loss

  function ViT:extra_repr()
    return ("image=%d, patch=%d, channels=%d, dim=%d, layers=%d, heads=%d, classes=%d"):format(
      self.image, self.patch_size, self.channels, self.dim, self.layers, self.heads, self.classes)
  end

  -- -------------------------------------------------------------------------
  -- MLPClassifier
  -- -------------------------------------------------------------------------

  -- MLPClassifier{input = 784, hidden = {256, 128}, classes = 10, act = "relu",
  -- dropout = 0, std = nil, seed | rng}.  Children fc.0 .. fc.{#hidden-1}, head.
  -- Weights start N(0, sqrt(2 / fan_in)) (He, for relu) unless std is given; the
  -- head starts N(0, sqrt(1 / fan_in)).  Dropout after each activation, training
  -- mode only.
  local MLPClassifier = class("MLPClassifier")

  local MLP_SCHEMA = { input = { "posint", 784 }, hidden = { "intlist", { 256, 128 } },
    classes = { "posint", 10 }, act = { U.ACTS, "relu" }, dropout = { "prob", 0 }, std = { "nonneg" },
    seed = { "int" }, rng = { "generator" } }

  local function mlp_options(opts)
    return one_rng("MLPClassifier", check_opts("MLPClassifier", opts, MLP_SCHEMA))
  end

  function MLPClassifier:_init(opts)
    local o, rng = options_rng(mlp_options, opts)
    self.input, self.hidden, self.classes, self.act = o.input, o.hidden, o.classes, o.act
    self._act = diloco[o.act]
    self.fc = {}
    local prev = o.input
    for i, h in ipairs(o.hidden) do
      self.fc[i] = self:_child("fc." .. (i - 1), Linear(prev, h, { std = o.std or sqrt(2 / prev), rng = rng }),
        false)
      prev = h
    end
    self:_child("head", Linear(prev, o.classes, { std = o.std or sqrt(1 / prev), rng = rng }))
    if o.dropout > 0 then self:_child("drop", nn.Dropout(o.dropout, { rng = rng })) end
  end

  function MLPClassifier:forward(x)
    local h, act, drop = as_tensor(x), self._act, self.drop
    for i = 1, #self.fc do
      h = act(self.fc[i]:forward(h))
      if drop then h = drop:forward(h) end
    end
    return self.head:forward(h)
  end

  MLPClassifier.loss = classifier_loss

  function MLPClassifier:extra_repr()
    return ("input=%d, hidden={%s}, classes=%d, act=%s"):format(self.input, table.concat(self.hidden, ", "),
      self.classes, self.act)
  end

  -- nn.model_options(arch, opts) -> the checked options of the model `arch` ("gpt",
  -- "vit", "mlp") with every default filled; raises naming the bad option.  Builds
  -- nothing, so a recipe or a file's metadata can be checked (and its size
  -- estimated, diloco.estimate) before any memory is committed to it.
  local OPTIONS = { gpt = gpt_options, vit = vit_options, mlp = mlp_options }
  nn.ARCHS = { gpt = GPT, vit = ViT, mlp = MLPClassifier }
  function nn.model_options(arch, opts)
    local f = OPTIONS[arch]
    if not f then raise(("model: arch = %s: expected one of gpt, vit, mlp"):format(U.show(arch))) end
    return f(opts)
  end
end

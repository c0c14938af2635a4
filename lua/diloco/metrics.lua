-- diloco.metrics: the JSON-lines metrics file of the CLI contract.
--
--   local m = assert(diloco.metrics.open("runs/x/metrics.jsonl", { append = true }))
--   assert(m:write("step", { step = 10, loss = 2.5 }))  --> {"event":"step","time":...,"step":10,"loss":2.5}
--
-- One object per line.  `event` comes first, then `time` (wall clock, seconds since the
-- Unix epoch, to the millisecond), then the event's fields in a fixed order (FIELDS
-- below; fields an event does not list follow in sorted order), so the lines diff and
-- grep well.  A float that is exactly an f32 (losses, gradient norms: what the engine
-- computes) is printed with the fewest digits that read back to the same f32; any other
-- float with the fewest that read back to the same double, without an exponent between
-- 1e-4 and 1e15 (40960.0, not 4.096e+04); integers as integers.  The summary always
-- carries every field of SUMMARY, null where unknown.  Strings (keys and values, also
-- inside tables) are written as valid UTF-8: a byte that cannot start a valid sequence
-- becomes "?", so no string, a peer's text included, can fail a line.
--
-- Every line is flushed as written, so an interrupted run leaves a complete file (a line
-- a full disk cut short is taken back), and
-- every write is checked: the first failure (a full disk, /dev/full, a closed pipe) is
-- returned as nil, message, and the writer stays failed (later writes return the same
-- error), so the run can stop, save and report it.  Appending to a file whose last line
-- was cut short (a kill -9 mid-write) starts on a new line.
local diloco = require "diloco"
local M = {}
M.__index = M

M.FIELDS = {
  step = { "learner", "step", "loss", "aux_loss", "lr", "grad_norm", "tokens", "tokens_per_s", "virtual_s", "wall_s" },
  eval = { "step", "loss", "accuracy", "tokens", "virtual_s", "wall_s", "final", "loss_all", "accuracy_all", "rows_all" },
  merge = { "fragment", "version", "contributors", "live", "quorum", "grace", "waited", "all_sent", "flushed",
    "bytes_in", "bytes_out", "virtual_s" },
  fault = { "kind", "learner", "begin", "duration", "factor", "optimizer", "virtual_s" },
  reject = { "learner", "fragment", "reason", "virtual_s" },
  checkpoint = { "step", "path", "seconds", "error", "kept", "removed" },
  resume = { "step", "tokens", "from", "changed" },
  resync = { "learner", "fragment", "from_version", "to_version", "epoch" },
  summary = nil, -- M.SUMMARY
}

-- The summary's fields: the CLI contract's, then what a single run adds.
M.SUMMARY = { "preset", "learners", "steps", "tokens", "final_eval_loss", "final_eval_accuracy", "goodput",
  "uptime", "bytes_up", "bytes_down", "wall_s", "train_s", "tokens_per_s", "params", "interrupted", "signal",
  "error", "save_error", "checkpoint", "checkpoint_step", "recipe", "out", "gemm", "threads", "virtual_s", "idle" }
M.FIELDS.summary = M.SUMMARY

local pack, unpack = string.pack, string.unpack

-- s (the shortest %g text that reads back to v) without its exponent where v is of a
-- size a reader takes in at a glance: 40960 rather than 4.096e+04, 20 rather than 2e+01;
-- the fewest decimals that still read back (same(text) true).
local function plain(s, v, same)
  if not s:find("e", 1, true) then return s end
  local a = math.abs(v)
  if a < 1e-4 or a >= 1e15 then return s end
  for decimals = 0, 20 do
    local t = string.format("%." .. decimals .. "f", v)
    if same(t) then return t end
  end
  return s
end

-- The shortest decimal text of a float: the f32 rule or the double rule (see above).
local function float_text(v)
  if v ~= v or v == math.huge or v == -math.huge then return "null" end
  local is_f32 = unpack("<f", pack("<f", v)) == v
  local function same(t)
    local back = tonumber(t)
    if is_f32 then return pack("<f", back) == pack("<f", v) end
    return back == v
  end
  local s
  for digits = 1, 17 do
    s = string.format("%." .. digits .. "g", v)
    if same(s) then break end
  end
  s = plain(s, v, same)
  if not s:find("[%.eEn]") then s = s .. ".0" end -- stays a float when read back
  return s
end
M.float_text = float_text

-- The shortest decimal text that reads back to the same double (no f32 rule).
function M.double_text(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v or v == math.huge or v == -math.huge then return tostring(v) end
  local function same(t) return tonumber(t) == v end
  for digits = 1, 17 do
    local s = string.format("%." .. digits .. "g", v)
    if same(s) then return plain(s, v, same) end
  end
  return string.format("%.17g", v)
end

-- s as valid UTF-8: each byte where a valid sequence cannot start becomes "?".  A
-- metrics line never fails for a string's bytes: some come from peers, or are cut at a
-- byte count (docs/protocol.md, "Text from the wire").
function M.valid_utf8(s)
  if utf8.len(s) then return s end
  local out, i = {}, 1
  while true do
    local n, bad = utf8.len(s, i)
    if n then
      out[#out + 1] = s:sub(i)
      return table.concat(out)
    end
    out[#out + 1] = s:sub(i, bad - 1) .. "?"
    i = bad + 1
  end
end

-- A copy of table t with every string key and value made valid UTF-8 (seen: the tables
-- on the way down, a cycle is the encoder's to report).
local function valid_table(t, seen)
  if seen[t] then return t end
  seen[t] = true
  local c = {}
  for k, v in pairs(t) do
    if type(k) == "string" then k = M.valid_utf8(k) end
    if type(v) == "string" then v = M.valid_utf8(v)
    elseif type(v) == "table" and getmetatable(v) == nil then v = valid_table(v, seen) end
    c[k] = v
  end
  return c
end

local function value_text(v)
  local t = type(v)
  if v == nil then return "null" end
  if t == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return float_text(v)
  end
  if t == "boolean" then return tostring(v) end
  if t == "string" then return diloco.json_encode(M.valid_utf8(v)) end
  if t == "table" then
    local ok, text = pcall(diloco.json_encode, v, { sort_keys = true })
    if ok then return text end
    return diloco.json_encode(valid_table(v, {}), { sort_keys = true }) -- (another error raises as before)
  end
  return diloco.json_encode(M.valid_utf8(tostring(v)))
end

-- The line for one event (without its newline).
function M.line(event, fields, time)
  local order = M.FIELDS[event] or {}
  local parts = { '{"event":' .. diloco.json_encode(event), '"time":' .. string.format("%.3f", time) }
  local listed = {}
  for _, k in ipairs(order) do
    listed[k] = true
    local v = fields[k]
    if v ~= nil or event == "summary" then parts[#parts + 1] = diloco.json_encode(M.valid_utf8(k)) .. ":" .. value_text(v) end
  end
  local extra = {}
  for k in pairs(fields) do
    if not listed[k] and k ~= "event" and k ~= "time" then extra[#extra + 1] = k end
  end
  table.sort(extra)
  for _, k in ipairs(extra) do parts[#parts + 1] = diloco.json_encode(M.valid_utf8(k)) .. ":" .. value_text(fields[k]) end
  return table.concat(parts, ",") .. "}"
end

-- Opens path (nil: a writer that keeps nothing).  opts.append: add to the end of an
-- existing file instead of replacing it.  Returns the writer, or nil and a message.
function M.open(path, opts)
  opts = opts or {}
  local self = setmetatable({ path = path }, M)
  if not path then return self end
  local prefix = ""
  if opts.append then
    local r = io.open(path, "rb")
    if r then
      local size = r:seek("end")
      if size and size > 0 then
        r:seek("set", size - 1)
        if r:read(1) ~= "\n" then prefix = "\n" end
      end
      r:close()
    end
  end
  local f, err = io.open(path, opts.append and "a" or "w")
  if not f then return nil, string.format("metrics %s: %s", path, err) end
  self.file = f
  -- the bytes of complete lines: a write that fails is cut back to here (a regular file)
  local _, kind, size = diloco.file_id(path)
  self.size = kind == "file" and (opts.append and size or 0) or nil
  if prefix ~= "" then
    local ok, werr = self:raw(prefix)
    if not ok then return nil, werr end
  end
  return self
end

-- Writes text and flushes; the first failure sticks.
function M:raw(text)
  if self.failed then return nil, self.failed end
  if not self.file then return true end
  local ok, err = self.file:write(text)
  if ok then ok, err = self.file:flush() end
  if not ok then
    self.failed = string.format("metrics %s: writing failed: %s", self.path, tostring(err))
    -- part of the line may have reached the file (a full disk): the file ends with the
    -- last complete line instead, and takes no more
    pcall(self.file.close, self.file)
    self.file = nil
    if self.size then diloco.truncate(self.path, self.size) end
    return nil, self.failed
  end
  if self.size then self.size = self.size + #text end
  return true
end

-- Writes one event; true, or nil and the message of the (first) write failure.
function M:write(event, fields)
  return self:raw(M.line(event, fields, diloco.wall_time()) .. "\n")
end

-- Closes the file; true, or nil and the message if a write or the close failed.
function M:close()
  if self.file then
    local ok, err = self.file:close()
    self.file = nil
    if not ok and not self.failed then
      self.failed = string.format("metrics %s: closing failed: %s", self.path, tostring(err))
    end
  end
  if self.failed then return nil, self.failed end
  return true
end

return M

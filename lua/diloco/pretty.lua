-- diloco.pretty: readable values for the REPL (and for anyone else who prints tables).
--
--   pretty.format(v[, opts]) -> string    any value; tables nested, sorted, bounded
--   pretty.tensor(t[, opts]) -> string    a Tensor as aligned rows, large ones elided
--   pretty.print(...)                     print() with format() for every non-string
--
-- opts: depth (levels of nested tables shown, default 3), items (entries shown per
-- table, default 20), width (a table that fits stays on one line, default 78), rows and
-- cols (tensor rows/columns shown before eliding, default 10: the first and last few),
-- slices (2-D slices of a >2-D tensor shown, default 4).  A table met again inside
-- itself prints as <cycle>; one deeper than `depth` as {...} (with its size).
local M = {}

local DEFAULTS = { depth = 3, items = 20, width = 78, rows = 10, cols = 10, slices = 4 }

local function option(opts, k)
  local v = opts and opts[k]
  if v == nil then return DEFAULTS[k] end
  if math.type(v) ~= "integer" or v < 1 then
    error(("pretty: opts.%s = %s: expected an integer >= 1"):format(k, tostring(v)), 3)
  end
  return v
end

local function settings(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("pretty: opts must be a table, got " .. type(opts), 3)
  end
  local s = {}
  for k in pairs(DEFAULTS) do s[k] = option(opts, k) end
  return s
end

local function is_tensor(v)
  return type(v) == "userdata" and getmetatable(v) ~= nil and package.loaded.diloco ~= nil
    and package.loaded.diloco.is_tensor(v)
end

-- ---------------------------------------------------------------------------
-- tensors
-- ---------------------------------------------------------------------------

-- One number format for every element shown: integers as integers, else %.4f, and
-- %.4e when the largest magnitude is too large or too small for a fixed point.
local function number_format(values)
  local all_int, maxabs = true, 0
  for _, v in ipairs(values) do
    if v ~= v or v == math.huge or v == -math.huge then
      -- nan/inf print as words; they do not decide the format
    else
      if v ~= math.floor(v) or math.abs(v) >= 1e15 then all_int = false end
      if math.abs(v) > maxabs then maxabs = math.abs(v) end
    end
  end
  local fmt
  if all_int then
    fmt = function(v) return ("%d"):format(v) end
  elseif maxabs >= 1e5 or maxabs < 1e-3 then
    fmt = function(v) return ("%.4e"):format(v) end
  else
    fmt = function(v) return ("%.4f"):format(v) end
  end
  return function(v)
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" end
    if v == -math.huge then return "-inf" end
    return fmt(v)
  end
end

-- The positions shown of an axis of size n: all of them, or the first and last few
-- with false marking the elided middle.
local function shown(n, limit)
  local idx = {}
  if n <= limit then
    for i = 1, n do idx[#idx + 1] = i end
  else
    local head = (limit + 1) // 2
    local tail = limit - head
    for i = 1, head do idx[#idx + 1] = i end
    idx[#idx + 1] = false
    for i = n - tail + 1, n do idx[#idx + 1] = i end
  end
  return idx
end

-- The lines of a 2-D block: get(r, c) gives the element; returns the formatted rows.
local function matrix_lines(get, nrows, ncols, s, fmt)
  local rows, cols = shown(nrows, s.rows), shown(ncols, s.cols)
  local cells, width = {}, 0
  for ri, r in ipairs(rows) do
    cells[ri] = {}
    for ci, c in ipairs(cols) do
      local text = (r and c) and fmt(get(r, c)) or ((r or c) and "..." or "")
      if not r and c then text = "..." end
      cells[ri][ci] = text
      if #text > width then width = #text end
    end
  end
  local lines = {}
  for ri in ipairs(rows) do
    local parts = {}
    for ci in ipairs(cols) do parts[ci] = ("%" .. width .. "s"):format(cells[ri][ci]) end
    lines[ri] = "  " .. table.concat(parts, " ")
  end
  return lines
end

-- Every value that will be shown, so one format fits them all.
local function collect(get, nrows, ncols, s, out)
  for _, r in ipairs(shown(nrows, s.rows)) do
    if r then
      for _, c in ipairs(shown(ncols, s.cols)) do
        if c then out[#out + 1] = get(r, c) end
      end
    end
  end
end

local function header(t)
  local h = "Tensor[" .. table.concat(t.shape, ",") .. "]"
  if t.requires_grad then h = h .. " requires_grad" end
  if t.grad ~= nil then h = h .. " (has grad)" end
  if t.op ~= nil and t.op ~= "none" then h = h .. " op=" .. t.op end
  return h
end

function M.tensor(t, opts)
  local s = settings(opts)
  if not is_tensor(t) then error("pretty.tensor: expected a Tensor, got " .. type(t), 2) end
  local ok, shape = pcall(function() return t.shape end)
  if not ok then return tostring(t) end -- a freed tensor says so itself
  local nd = #shape
  if nd == 0 then
    return header(t) .. " " .. number_format({ t:item() })(t:item())
  end
  if t.numel == 0 then return header(t) .. " (no elements)" end
  -- View everything as slices of 2-D blocks [rows, cols]; a 1-D tensor is one row.
  local nrows = nd >= 2 and shape[nd - 1] or 1
  local ncols = shape[nd]
  local lead = {}
  for i = 1, nd - 2 do lead[i] = shape[i] end
  -- The leading positions of each slice shown (row-major), elided beyond s.slices.
  local nslices = 1
  for _, n in ipairs(lead) do nslices = nslices * n end
  local function slice_index(k) -- k 1-based -> leading positions
    local pos, rem = {}, k - 1
    for i = #lead, 1, -1 do
      pos[i] = rem % lead[i] + 1
      rem = rem // lead[i]
    end
    return pos
  end
  local function getter(pos)
    return function(r, c)
      local args = {}
      for i, p in ipairs(pos) do args[i] = p end
      if nd >= 2 then args[#args + 1] = r end
      args[#args + 1] = c
      return t:get(table.unpack(args))
    end
  end
  local slices = shown(nslices, s.slices)
  local values = {}
  for _, k in ipairs(slices) do
    if k then collect(getter(slice_index(k)), nrows, ncols, s, values) end
  end
  local fmt = number_format(values)
  local lines = { header(t) }
  for _, k in ipairs(slices) do
    if not k then
      lines[#lines + 1] = "  ... (" .. (nslices - s.slices) .. " more slices)"
    else
      local pos = slice_index(k)
      if nd > 2 then
        lines[#lines + 1] = "[" .. table.concat(pos, ",") .. string.rep(",:", 2) .. "] ="
      end
      for _, l in ipairs(matrix_lines(getter(pos), nrows, ncols, s, fmt)) do
        lines[#lines + 1] = l
      end
    end
  end
  return table.concat(lines, "\n")
end

-- ---------------------------------------------------------------------------
-- everything else
-- ---------------------------------------------------------------------------

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
  repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") and not KEYWORDS[k] then return k end
  if type(k) == "string" then return "[" .. ("%q"):format(k) .. "]" end
  return "[" .. tostring(k) .. "]"
end

local TYPE_ORDER = { number = 1, string = 2, boolean = 3 }

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (TYPE_ORDER[ta] or 9) < (TYPE_ORDER[tb] or 9) or
      ((TYPE_ORDER[ta] or 9) == (TYPE_ORDER[tb] or 9) and ta < tb) end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local function scalar(v)
  local tv = type(v)
  if tv == "string" then return (("%q"):format(v):gsub("\\\n", "\\n")) end
  if tv == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if v ~= v then return "nan" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    local text = tostring(v) -- %.14g
    return text:find("[%.eEn]") and text or text .. ".0"
  end
  if tv == "function" then
    local help = package.loaded["diloco.help"]
    local name = help and help.name_of(v)
    if name then return "function: " .. name end
  end
  if tv == "userdata" and is_tensor(v) then return tostring(v) end
  return tostring(v)
end

local function fmt_value(v, s, level, seen, indent)
  if type(v) ~= "table" then return scalar(v) end
  local mt = getmetatable(v)
  if mt and mt.__tostring then return tostring(v) end -- objects that say what they are
  if seen[v] then return "<cycle>" end
  -- the array part in order, then the other keys sorted
  local n = #v
  local keys = {}
  for k in pairs(v) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_less)
  local total = n + #keys
  if total == 0 then return "{}" end
  if level > s.depth then return "{...} (" .. total .. (total == 1 and " entry)" or " entries)") end
  seen[v] = true
  local parts = {}
  local shown_n = 0
  for i = 1, n do
    if shown_n >= s.items then break end
    parts[#parts + 1] = fmt_value(v[i], s, level + 1, seen, indent .. "  ")
    shown_n = shown_n + 1
  end
  for _, k in ipairs(keys) do
    if shown_n >= s.items then break end
    parts[#parts + 1] = key_text(k) .. " = " .. fmt_value(v[k], s, level + 1, seen, indent .. "  ")
    shown_n = shown_n + 1
  end
  if total > shown_n then parts[#parts + 1] = "... (" .. (total - shown_n) .. " more)" end
  seen[v] = nil
  local one = "{ " .. table.concat(parts, ", ") .. " }"
  if #one + #indent <= s.width and not one:find("\n") then return one end
  -- several entries a line while they fit, each line indented one level deeper
  local lines, line = {}, nil
  local pad = indent .. "  "
  for i, p in ipairs(parts) do
    local piece = p .. (i < #parts and "," or "")
    if line and not p:find("\n") and not line:find("\n") and #line + 1 + #piece <= s.width then
      line = line .. " " .. piece
    else
      if line then lines[#lines + 1] = line end
      line = pad .. piece
    end
  end
  lines[#lines + 1] = line
  return "{\n" .. table.concat(lines, "\n") .. "\n" .. indent .. "}"
end

function M.format(v, opts)
  local s = settings(opts)
  if is_tensor(v) then return M.tensor(v, opts) end
  return fmt_value(v, s, 1, {}, "")
end

-- print(), but tables and tensors readable; strings as they are.
function M.print(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do
    local v = select(i, ...)
    parts[i] = type(v) == "string" and v or M.format(v)
  end
  io.write(table.concat(parts, "\t"), "\n")
end

return M

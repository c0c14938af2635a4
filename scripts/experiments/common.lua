-- Helpers shared by the scripts of scripts/experiments (run with diloco-lua, which gives
-- them `arg`): files, shell quoting, mean and spread, and the generated sections of a
-- document.  Load it with dofile(ROOT .. "/scripts/experiments/common.lua").
local M = {}

-- s quoted for sh, as one word
function M.quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- the whole file, or nil when it cannot be opened
M.read = require("diloco.replay").read_file

function M.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- mean and sample standard deviation of a list (nil for an empty one; sd nil for one value)
function M.mean_sd(xs)
  local n, sum = #xs, 0
  if n == 0 then return nil end
  for _, x in ipairs(xs) do sum = sum + x end
  local m = sum / n
  if n < 2 then return m, nil end
  local ss = 0
  for _, x in ipairs(xs) do ss = ss + (x - m) ^ 2 end
  return m, math.sqrt(ss / (n - 1))
end

-- Replaces the section of the document at path between "<!-- NAME begin" and
-- "<!-- NAME end -->\n" with `section` (which carries both markers); appends it the first
-- time.
function M.write_section(path, name, section)
  local doc = M.read(path) or ""
  local a = doc:find("<!-- " .. name .. " begin", 1, true)
  local endm = "<!-- " .. name .. " end -->\n"
  local z = doc:find(endm, 1, true)
  if a and z then
    doc = doc:sub(1, a - 1) .. section .. doc:sub(z + #endm)
  else
    doc = doc:gsub("\n*$", "\n\n") .. section
  end
  M.write(path, doc)
end

return M

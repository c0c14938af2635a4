-- diloco.metrics: the JSON-lines metrics file of the CLI contract.
-- One object per line, `event` in {step, merge, eval, fault, summary}; the summary is
-- always the last line.  Every line is flushed as written, so an interrupted run
-- leaves a complete file.
local diloco = require "diloco"
local M = {}
M.__index = M

-- Opens path for writing (nil path: a writer that drops everything).
function M.open(path)
  local self = setmetatable({ path = path }, M)
  if path then
    local f, err = io.open(path, "w")
    if not f then return nil, string.format("--metrics %s: %s", path, err) end
    self.file = f
  end
  return self
end

function M:write(event, fields)
  if not self.file then return end
  fields.event = event
  self.file:write(diloco.json_encode(fields), "\n")
  self.file:flush()
end

function M:close()
  if self.file then
    self.file:close()
    self.file = nil
  end
end

return M

-- diloco.progress: a progress bar on a terminal, plain periodic lines otherwise.
local diloco = require "diloco"
local M = {}
M.__index = M

local function human(n)
  if n >= 1e6 then return string.format("%.2fM", n / 1e6) end
  if n >= 1e3 then return string.format("%.1fk", n / 1e3) end
  return string.format("%.0f", n)
end

local function duration(s)
  if s ~= s or s == math.huge then return "?" end
  s = math.floor(s + 0.5)
  if s >= 3600 then return string.format("%dh%02dm", s // 3600, s % 3600 // 60) end
  if s >= 60 then return string.format("%dm%02ds", s // 60, s % 60) end
  return string.format("%ds", s)
end
M.duration = duration
M.human = human

-- opts: total (steps), every (plain-line period in steps), tty (default: stdout is a
-- terminal), out (default io.stdout), unit ("tok" or "img").
-- Every write is checked: after the first failure (a closed pipe: `run ... | head`)
-- self.failed holds its message and nothing more is written; the caller decides.
function M.new(opts)
  local self = setmetatable({}, M)
  self.total = opts.total
  self.every = opts.every or math.max(1, opts.total // 20)
  self.tty = opts.tty
  if self.tty == nil then self.tty = diloco.isatty(1) end
  self.out = opts.out or io.stdout
  self.unit = opts.unit or "tok"
  self.last_draw = 0
  return self
end

-- info: step, loss, rate (units/s), eta (s), eval_loss (optional)
function M:update(info, force)
  local text = string.format("step %d/%d  loss %.4f  %s %s/s  ETA %s", info.step, self.total, info.loss,
    human(info.rate), self.unit, duration(info.eta))
  if info.eval_loss then text = text .. string.format("  eval %.4f", info.eval_loss) end
  if self.tty then
    local now = diloco.clock()
    if not force and now - self.last_draw < 0.1 then return end
    self.last_draw = now
    local width, frac = 24, info.step / self.total
    local fill = math.floor(frac * width + 0.5)
    self:emit(string.format("\r[%s%s] %s\027[K", string.rep("=", fill), string.rep(" ", width - fill), text))
  elseif force or info.step % self.every == 0 or info.step == self.total then
    self:emit(text, "\n")
  end
end

-- Writes and flushes; records the first failure.
function M:emit(...)
  if self.failed then return end
  local ok, err = self.out:write(...)
  if ok then ok, err = self.out:flush() end
  if not ok then self.failed = string.format("writing the progress to %s failed: %s",
    self.out == io.stdout and "stdout" or "its file", tostring(err)) end
end

-- A line that must not be overwritten by the bar (eval results, messages).
function M:print(line)
  self:emit(self.tty and "\r\027[K" or "", line, "\n")
end

function M:finish()
  self:emit(self.tty and "\n" or "")
end

return M

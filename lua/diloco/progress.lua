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
    self.out:write(string.format("\r[%s%s] %s\027[K", string.rep("=", fill), string.rep(" ", width - fill), text))
    self.out:flush()
  elseif force or info.step % self.every == 0 or info.step == self.total then
    self.out:write(text, "\n")
    self.out:flush()
  end
end

-- A line that must not be overwritten by the bar (eval results, messages).
function M:print(line)
  if self.tty then self.out:write("\r\027[K") end
  self.out:write(line, "\n")
  self.out:flush()
end

function M:finish()
  if self.tty then self.out:write("\n") end
  self.out:flush()
end

return M

-- diloco.progress: a one-line progress display on a terminal, plain periodic lines
-- otherwise.
--
--   local bar = diloco.progress.new { total = 1000, unit = "tok" }
--   bar:update { step = 10, loss = 2.5, rate = 1200, eta = 30 }   -- redraws the line
--   bar:eval { step = 100, loss = 2.1 }                           -- its own line, once
--   bar:print("a message")                                        -- a line above the bar
--   bar:finish()
--
-- On a terminal the line is redrawn in place and never wraps: it is cut to the
-- terminal's width - 1, asked of the kernel at each redraw (diloco.terminal_size), so
-- a resized window is followed at the next redraw.  Everything that must stay (eval
-- results, messages) is printed as a line of its own above it.
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

M.DEFAULT_WIDTH = 80 -- when the terminal reports no size
M.BAR_WIDTH = 24 -- of the [====    ] part, at most

-- opts: total (steps), every (plain-line period in steps), tty (default: stdout is a
-- terminal), out (default io.stdout), unit ("tok" or "img"), width (columns: a number,
-- or a function returning one or nil, called at each redraw; default the terminal's
-- on stdout, else DEFAULT_WIDTH).
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
  self.label = opts.label or "loss" -- what the loss shown is (sim: "island 1 loss")
  self.width = opts.width or function() return (diloco.terminal_size(1)) end
  self.last_draw = 0
  self.evals = {} -- steps whose eval was printed
  return self
end

-- The columns available now.
function M:columns()
  local w = self.width
  if type(w) == "function" then w = w() end
  w = math.tointeger(w)
  if not w or w < 1 then w = M.DEFAULT_WIDTH end
  return w
end

-- The status line for a width: the bar when there is room for it, then the text, cut
-- to width - 1 columns (the last column stays free: a line that fills the terminal
-- makes some terminals wrap on the next character).
function M:line(text, frac, width)
  local room = width - 1
  local barw = math.min(M.BAR_WIDTH, room - #text - 3)
  local line = text
  if barw >= 8 then
    local fill = math.floor(math.max(0, math.min(1, frac)) * barw + 0.5)
    line = string.format("[%s%s] %s", string.rep("=", fill), string.rep(" ", barw - fill), text)
  end
  if #line > room then line = line:sub(1, math.max(room, 0)) end
  return line
end

-- info: step, loss, rate (units/s), eta (s), eval_loss (optional: the status line
-- shows the latest eval; bar:eval prints each once).
function M:update(info, force)
  local text = string.format("step %d/%d  %s %.4f  %s %s/s  ETA %s", info.step, self.total, self.label, info.loss,
    human(info.rate), self.unit, duration(info.eta))
  if self.tty then
    local now = diloco.clock()
    if not force and now - self.last_draw < 0.1 then return end
    self.last_draw = now
    local eval_loss = info.eval_loss or self.eval_loss
    if eval_loss then text = text .. string.format("  eval %.4f", eval_loss) end
    self:emit("\r", self:line(text, info.step / self.total, self:columns()), "\027[K")
    self.drawn = true
  elseif force or info.step % self.every == 0 or info.step == self.total then
    self:emit(text, "\n")
  end
end

-- An evaluation: e.step, e.loss, e.accuracy (optional).  Printed as a line of its own,
-- once per step however often it is passed.
function M:eval(e)
  self.eval_loss = e.loss
  if self.evals[e.step] then return end
  self.evals[e.step] = true
  self:print(string.format("eval at step %d: loss %.4f%s", e.step, e.loss,
    e.accuracy and string.format(", accuracy %.2f%%", 100 * e.accuracy) or ""))
end

-- Writes and flushes; records the first failure.
function M:emit(...)
  if self.failed then return end
  local ok, err = self.out:write(...)
  if ok then ok, err = self.out:flush() end
  if not ok then self.failed = string.format("writing the progress to %s failed: %s",
    self.out == io.stdout and "stdout" or "its file", tostring(err)) end
end

-- A line that must not be overwritten by the bar (eval results, messages); the bar
-- comes back at the next update.
function M:print(line)
  self:emit(self.tty and "\r\027[K" or "", line, "\n")
  self.last_draw, self.drawn = 0, false
end

-- Leaves the last status line on the screen.
function M:finish()
  if self.tty and self.drawn then self:emit("\n") end
  self.drawn = false
end

return M

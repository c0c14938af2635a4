-- diloco.errors: the one error type of every driver and the one way a recipe hook is
-- called.  An error is a raised {diloco_error = message, code = exit status} table (1:
-- the run failed, 2: something the user gave is wrong); diloco.cli prints its message and
-- exits with its code.  diloco.train re-exports these under the same names.
local diloco = require "diloco"
local M = {}

-- A Lua error message without its "file.lua:12: " position prefix (the position of
-- our own loader code means nothing to the user).
local function plain(msg)
  if type(msg) == "table" and msg.diloco_error then return msg.diloco_error end
  return (tostring(msg):gsub("^[^%s:]+%.lua:%d+: ", ""))
end
M.plain = plain

-- The exit statuses of every command (docs/cli.md, "Exit status"): 3 is a learner that
-- trained to its end unheard by its syncer (core/include/diloco/supervise.h's
-- DLC_SUP_EXIT_UNDELIVERED: `run`'s supervisor takes it as done, not as a crash).
M.EXIT = { ok = 0, failed = 1, usage = 2, undelivered = 3, signal_base = 128, interrupted = 130 }

-- Raises the one error type; code is the CLI's exit status (1: the run failed,
-- 2: something the user gave is wrong).
local function fail_code(code, fmt, ...)
  error({ diloco_error = string.format(fmt, ...), code = code }, 0)
end
local function fail(fmt, ...) fail_code(1, fmt, ...) end
M.fail, M.fail_code = fail, fail_code

-- Every recipe hook runs through here: one protected call; an error stops the run,
-- naming the hook and the error (its position in the recipe included); the hook's
-- traceback is kept for --debug (diloco.cli prints it), not printed otherwise.  A
-- SIGINT/SIGTERM/SIGHUP that arrives while a hook runs (an endless one included) ends the
-- hook at once with {diloco_stop = signal}, which the drivers' loops take as that signal
-- arriving between two steps (M.loop_error).
local HOOK_CHECK_EVERY = 100000 -- Lua instructions between two looks at the signals
function M.call_hook(name, fn, ...)
  local tb
  local prev = table.pack(debug.gethook())
  if not diloco.signals.pending() then -- (already stopping: the hook runs to its end)
    debug.sethook(function()
      local sig = diloco.signals.pending()
      if sig then error({ diloco_stop = sig }, 0) end
    end, "", HOOK_CHECK_EVERY)
  end
  local ok, res = xpcall(fn, function(e)
    if type(e) ~= "table" or not e.diloco_stop then
      tb = debug.traceback(type(e) == "table" and e.diloco_error or tostring(e), 2)
    end
    return e
  end, ...)
  debug.sethook(prev[1], prev[2], prev[3])
  if not ok then
    if type(res) == "table" and res.diloco_stop then error(res, 0) end
    local msg = type(res) == "table" and res.diloco_error or tostring(res)
    error({ diloco_error = string.format("hooks.%s failed: %s", name, msg), code = 1, hook_traceback = tb }, 0)
  end
  return res
end

-- What a driver's loop that ended with the error e reports: nil when a signal stopped a
-- hook (the run then stops as for that signal between steps), else the message.
function M.loop_error(e)
  if e == nil or (type(e) == "table" and e.diloco_stop) then return nil end
  return plain(e)
end
return M

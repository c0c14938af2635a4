-- diloco.runview: what a real run shows and counts of its learners: the live display
-- (redrawn on a terminal, every 5 s off one), each learner's own metrics read for it, and
-- the glue between those metrics and the account (core/account.h, diloco.Account) that the
-- display and the end table read.  It works on the run context of lua/diloco/cluster.lua
-- (runctx).  docs/runtime.md.
local diloco = require "diloco"
local rc = require "diloco.runctx"
local write, median, elapsed, island, say, run_step, fault = rc.write, rc.median, rc.elapsed, rc.island, rc.say,
  rc.run_step, rc.fault
local M = {}

M.ACCOUNT_EVERY = 10 -- s: the display re-reads the learners' metrics for the account this often

-- ---- the display ----

-- The newest step event of learner m's own metrics (run: its directory is OUT/learner-N),
-- read incrementally; its fault events (a rollback) go into OUT/metrics.jsonl too.
local function learner_progress(ctx, m)
  local L = ctx.learners[m]
  if not ctx.supervising then return L.progress end
  if not L.tail then
    L.tail = io.open(string.format("%s/learner-%d/metrics.jsonl", ctx.out, m), "r")
    if not L.tail then return nil end
  end
  while true do
    -- a line the learner is still writing (no newline yet) waits for its end: read as it
    -- stood, a fault event in it was lost (seen: a rollback missing from a loaded CI run)
    local line = L.tail:read("L")
    if not line then break end
    if line:sub(-1) ~= "\n" then
      L.partial = (L.partial or "") .. line
      break
    end
    if L.partial then line, L.partial = L.partial .. line, nil end
    if line:find('"event":"step"', 1, true) then
      local e = diloco.json_decode(line)
      if type(e) == "table" then L.progress = e end
    elseif line:find('"event":"join"', 1, true) and not line:find('"restored"', 1, true) then
      L.progress = nil
    elseif line:find('"event":"fault"', 1, true) then
      local e = diloco.json_decode(line)
      if type(e) == "table" then
        e.event, e.learner, e.learner_wall_s = nil, m, e.wall_s
        fault(ctx, e)
      end
    end
  end
  return L.progress
end

-- What learner m is doing, as the display shows it.  A syncer started by hand (serve)
-- supervises no process: it knows what the learner's connection says.
local function learner_state(ctx, m, L, i)
  if not ctx.supervising then
    if L.bye then return "done" end
    return i.connected and "training" or (L.joined and "lost" or "not joined yet")
  end
  if L.state == "running" then return i.connected and "training" or (L.joined and "lost" or "joining") end
  if L.state == "down" and L.restart_at then
    return string.format("down (%s, back in %.1fs)", L.down_cause or "?", math.max(0, L.restart_at - elapsed(ctx)))
  end
  return L.state
end

-- The run's progress for the display: its step of the recipe's steps and the time left
-- at the pace it has kept since the learners started.
local function progress_text(ctx, now)
  local step, total = ctx.syncer and run_step(ctx) or 0, ctx.recipe.steps
  local ran = now - ctx.account:t0()
  local eta = step > 0 and step < total and ran > 0 and (total - step) * ran / step or nil
  return string.format("step %d/%d%s", step, total, eta and ", ETA " .. diloco.progress.duration(eta) or "")
end

-- The live display: on a terminal a block of lines redrawn every second (a global line,
-- then one per learner), each cut to the terminal's width; otherwise the same lines
-- every 5 s.  Its shares are the account's (core/account.h), as of now: what the end
-- table will say, with the time since each learner's last report still to come.
local function display(ctx, force)
  local now = elapsed(ctx)
  local tty = diloco.isatty(2)
  local every = ctx.opts.display_every or (tty and 1 or 5)
  if ctx.quiet or not ctx.syncer or (not force and now - (ctx.last_display or -1e9) < every) then return end
  ctx.last_display = now
  local st = ctx.syncer:stats()
  local lines = {}
  for m, L in ipairs(ctx.learners) do
    local i = ctx.syncer:learner(m)
    local p = learner_progress(ctx, m)
    local tps = p and p.tokens_per_s or (i.step_time > 0 and ((i.tokens_per_step or 0) > 0 and i.tokens_per_step or ctx.tokens_per_batch) / i.step_time) or 0
    -- what the end reads, as of now; its metrics re-read at most every ACCOUNT_EVERY s (a
    -- long run's files are long, and this is the syncer's loop)
    ctx.acc_cache = ctx.acc_cache or {}
    local c = ctx.acc_cache[m]
    if not c or now - c.t >= M.ACCOUNT_EVERY then
      c = { t = now, acc = M.learner_account(ctx.out, m) }
      ctx.acc_cache[m] = c
    end
    M.island_work(ctx, m, i, c.acc or false)
    local a = ctx.account:row(m, now)
    lines[#lines + 1] = string.format("  L%-2d %-22s step %6d/%d  loss %s  %s tok/s  useful %s  down %s  waiting %s",
      m, learner_state(ctx, m, L, i), p and p.step or i.steps, ctx.recipe.steps,
      p and p.loss and string.format("%.4f", p.loss) or "   -  ", diloco.progress.human(tps),
      string.format("%.0f%%", 100 * a.useful), string.format("%.0f%%", 100 * a.down),
      string.format("%.0f%%", 100 * a.waiting))
  end
  local goodput = ctx.account:goodput(now)
  local head = string.format("[%6.1fs] %s, %d merges, goodput so far %s, %s up / %s down%s", now,
    progress_text(ctx, now), ctx.merges, goodput > 0 and string.format("%.1f%%", 100 * goodput) or "-",
    diloco.progress.human(st.bytes_in + (ctx.bytes_prev_in or 0)) .. "B",
    diloco.progress.human(st.bytes_out + (ctx.bytes_prev_out or 0)) .. "B",
    ctx.last_eval and string.format(", last eval %.4f", ctx.last_eval.loss) or "")
  local width = tty and (diloco.terminal_size(2)) or nil
  local function fit(l) -- (the last column free: a full line would wrap on some terminals)
    return width and width > 1 and #l > width - 1 and l:sub(1, width - 1) or l
  end
  local out = {}
  if tty and ctx.drawn then out[#out + 1] = string.format("\27[%dA", ctx.drawn) end -- up over the last block
  out[#out + 1] = "\27[2K" .. fit(head) .. "\n"
  for _, l in ipairs(lines) do out[#out + 1] = (tty and "\27[2K" or "") .. fit(l) .. "\n" end
  if not tty then out[1] = head .. "\n" end
  io.stderr:write(table.concat(out))
  io.stderr:flush()
  ctx.drawn = tty and (#lines + 1) or nil
end

-- What learner m's own metrics (OUT/learner-N/metrics.jsonl, every process it ran as,
-- each from a join event on) say: the last summary, and over all its processes the
-- steps, tokens, train_s, wait_s and wall_s (a killed one wrote no summary: its last
-- step event counts, so up to log.every steps of it are missed) and the start-up seconds.
function M.learner_account(out, m)
  local f = io.open(string.format("%s/learner-%d/metrics.jsonl", out, m), "r")
  if not f then return nil end
  local acc = { steps = 0, tokens = 0, train_s = 0, wait_s = 0, wall_s = 0, startup_s = 0, processes = 0,
    overwritten_s = 0, kept_s = 0, unsent_s = 0, fates = {} }
  local cur
  local function close_cur()
    if not cur then return end
    local e = cur.summary or cur.last
    if e then
      acc.steps = acc.steps + (cur.summary and cur.summary.steps or math.max(0, (e.step or cur.step0) - cur.step0))
      acc.tokens = acc.tokens + math.max(0, (e.tokens or 0) - cur.tok0)
      acc.train_s = acc.train_s + (e.train_s or 0)
      acc.wait_s = acc.wait_s + (e.wait_s or 0)
      acc.wall_s = acc.wall_s + (e.wall_s or 0)
    end
    -- the account of a process that ended with a summary; of a killed one, what its last
    -- step event said it had sent, overwritten and kept (its unsent work, and the steps
    -- since that event, died with it: dropped, core/account.h)
    local a = cur.summary and type(cur.summary.account) == "table" and cur.summary.account
    if not a and not cur.summary and cur.last and cur.last.overwritten_s then
      a = { overwritten_s = cur.last.overwritten_s, kept_s = cur.last.kept_s, sent_s = cur.last.sent_s,
        sent_steps = cur.last.sent_steps }
    end
    if a then
      for k, v in pairs(a) do
        if type(v) == "number" and v >= 0 and v < math.huge then acc.fates[k] = (acc.fates[k] or 0) + v end
      end
      acc.overwritten_s, acc.kept_s, acc.unsent_s = acc.fates.overwritten_s or 0, acc.fates.kept_s or 0,
        acc.fates.unsent_s or 0
    end
    cur = nil
  end
  for line in f:lines() do
    local kind = line:match('"event":"(%a+)"')
    if kind == "join" or kind == "step" or kind == "summary" then
      local e = diloco.json_decode(line)
      if type(e) == "table" then
        if kind == "join" then
          close_cur()
          cur = { step0 = e.step or 0, tok0 = e.tokens or 0 }
          acc.processes = acc.processes + 1
          acc.startup_s = acc.startup_s + (e.startup_s or 0)
        elseif cur and kind == "step" then
          cur.last = e
        elseif cur then
          cur.summary, acc.summary = e, e
        end
      end
    end
  end
  close_cur()
  f:close()
  return acc
end

-- Learner m's work for the account (core/account.h), from what its processes measured
-- (its own metrics, when its directory is here: M.learner_account) and the syncer's
-- record i: computing and waiting, its compute by fate, the steps of it merged, and its
-- healthy rate, tokens over its compute (else the fastest step time it reported, not the
-- last, which a loaded host's last steps can make slower than its run, and its batch;
-- a value no learner could report is no rate).  acc: its M.learner_account when already
-- read (false: none to read), else read here.  Returns the learner's account (or nil), its
-- steps and tokens over every process, and its rate.
function M.island_work(ctx, m, i, acc)
  local r = ctx.recipe
  if acc == nil then acc = M.learner_account(ctx.out, m) end
  acc = acc or nil -- (false: none to read)
  local own = acc and acc.processes > 0
  -- (else the syncer's record: the tokens its last heartbeat reported, in its steps, as many
  -- tokens as its contributions count a step (an island of R ranks trains R batches a
  -- step, which a syncer started by hand does not know from the recipe), else the
  -- island's batch; its schedule step is more when it caught up with the others' rounds)
  local tpb = (i.tokens_per_step or 0) > 0 and i.tokens_per_step
    or ctx.loaders.tokens_per_batch * (r.islands.list[m].batch or r.data.batch) / r.data.batch
  local heard = i.tokens and i.tokens > 0 and tpb > 0 and math.floor(i.tokens / tpb + 0.5) or i.steps
  local ls = acc and acc.summary or {}
  local steps = own and acc.steps or ls.steps or heard
  local tokens = own and acc.tokens or ls.tokens or i.tokens
  local tps = acc and acc.train_s > 0 and tokens and tokens / acc.train_s or nil
  local step_t = (i.best_step_time or 0) > 0 and i.best_step_time or i.step_time
  if not tps and step_t and step_t > 0 and tpb > 0 then tps = tpb / step_t end
  if tps and not (tps > 0 and tps < math.huge) then tps = nil end
  local function seconds(x) return type(x) == "number" and x >= 0 and x < math.huge and x or 0 end
  -- without its metrics (a syncer started by hand): its compute from the steps it reported
  -- at its step time, the fate of the unmerged ones unknown (core/account.h, work.steps)
  local busy = own and acc.train_s or seconds(seconds(steps) * seconds(i.step_time))
  ctx.account:set_work(m, { busy_s = seconds(busy), idle_s = seconds(acc and acc.wait_s)
    + seconds(acc and acc.startup_s), nominal_tps = tps or 0, merged_steps = seconds(i.merged_steps),
    steps = not own and seconds(steps) or 0, fates = acc and acc.fates or nil })
  return acc, steps, tokens, tps
end

-- Tokens the learners trained so far, every process of each: as their own metrics last
-- said (run; up to log.every steps behind), else as their heartbeats to the syncer said.
function M.tokens_so_far(ctx)
  local total = 0
  for m = 1, #ctx.learners do
    local acc = ctx.supervising and M.learner_account(ctx.out, m)
    if acc and acc.processes > 0 then
      total = total + acc.tokens
    else
      local ok, i = pcall(ctx.syncer.learner, ctx.syncer, m)
      total = total + (ok and i and i.tokens or 0)
    end
  end
  return total
end


M.learner_progress, M.display = learner_progress, display

return M

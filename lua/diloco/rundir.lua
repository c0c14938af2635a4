-- diloco.rundir: the run directory OUT and what a run may do to it.
--
--   local rd = diloco.rundir.open("runs/charlm", { resume = "latest" })  -- raises a diloco error
--   rd.resume_path, rd.metrics_path              -- what to read, where to log
--   local ok, err = rd:save(step, write_checkpoint, write_model)
--   rd:close()
--
-- OUT holds metrics.jsonl (appended on resume), recipe.json (the effective recipe),
-- checkpoint-STEP.safetensors (the last checkpoint.keep of them), model.safetensors
-- (the parameters of the newest checkpoint) and .lock.  Opening it:
--   * creates it and proves it writable (a probe file) before anything is trained;
--   * takes an exclusive flock on OUT/.lock, so a second run on OUT is refused with a
--     message naming the first (pid, command, start time); the kernel drops the lock
--     when a run dies, even by kill -9;
--   * removes temporary files (NAME.tmp.PID.N) of saves whose process is gone;
--   * refuses a directory that already holds a run unless resuming it, --overwrite, or
--     opts.append (a run continued from checkpoints kept elsewhere: a syncer's in OUT/syncer);
--   * refuses a metrics path that names a checkpoint or model file.
-- Saving writes the step's checkpoint, then the model; if the model cannot be written
-- the new checkpoint is removed again, so model.safetensors and the newest checkpoint
-- are always of one step (the old pair is kept).  A save cut short by a kill between the
-- two leaves a complete checkpoint newer than the model: resume "latest" continues from
-- it, never removes it, and says so in self.model_behind ({step, path, model_step}: the
-- caller writes the model of that step again once it has loaded it).  Resume "latest"
-- takes the newest complete checkpoint (its header and size check out); newer ones that
-- do not are kept and named in self.skipped ({name, why}).  Each file is written to a
-- temporary name, synced and renamed (core/ckpt.c), so no file is ever half written.
local diloco = require "diloco"
local M = {}
M.__index = M

local function fail(code, fmt, ...)
  error({ diloco_error = string.format(fmt, ...), code = code }, 0)
end

local CKPT_PATTERN = "^checkpoint%-(%d+)%.safetensors$"
M.LEGACY_CHECKPOINT = "checkpoint.safetensors" -- written by diloco-lua 0.1 runs
local RUN_FILES = { "metrics.jsonl", "recipe.json", "model.safetensors", M.LEGACY_CHECKPOINT }

function M.checkpoint_name(step)
  return string.format("checkpoint-%08d.safetensors", step)
end

-- Checkpoints in dir, oldest first: { {step = n, name = "checkpoint-...", path = ...}, ... }.
function M.checkpoints(dir)
  local names = diloco.listdir(dir) or {}
  local list = {}
  for _, name in ipairs(names) do
    local step = name:match(CKPT_PATTERN)
    if step then list[#list + 1] = { step = math.tointeger(tonumber(step)), name = name, path = dir .. "/" .. name } end
  end
  table.sort(list, function(a, b) return a.step < b.step end)
  return list
end

-- Is the file at path a safetensors file (8-byte little-endian header length, then '{')?
local function looks_like_safetensors(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local head = f:read(9)
  f:close()
  return head ~= nil and #head == 9 and head:sub(9, 9) == "{"
end

local function exists(path)
  return diloco.file_id(path) ~= nil
end

-- Removes NAME.tmp.PID.N (and the older NAME.tmp.PID) files whose writer is gone.
local function remove_stale_temps(dir)
  local removed = {}
  for _, name in ipairs(diloco.listdir(dir) or {}) do
    local pid = name:match("%.tmp%.(%d+)%.%d+$") or name:match("%.tmp%.(%d+)$")
    pid = pid and math.tointeger(tonumber(pid))
    if pid and (pid == diloco.pid() or not diloco.pid_alive(pid)) then
      if os.remove(dir .. "/" .. name) then removed[#removed + 1] = name end
    end
  end
  return removed
end

local function iso_now()
  return os.date("!%Y-%m-%dT%H:%M:%SZ")
end

-- opts: resume (nil | "latest" | a checkpoint path), overwrite (bool), metrics (a path
-- instead of OUT/metrics.jsonl), command (shown to a second run), keep (checkpoints to
-- keep, >= 1), resumable (false: the command has no --resume, its refusal does not offer
-- one), resume_hint (the flag its refusal offers, "--resume latest" unless given).  Raises {diloco_error, code} errors: 2 for a refusal the user can fix
-- with a flag, 1 for an environmental failure.
function M.open(out, opts)
  opts = opts or {}
  local self = setmetatable({ out = out, keep = opts.keep or 3 }, M)
  local ok, err = diloco.mkdir_p(out)
  if not ok then fail(1, "--out %s: %s", out, err) end

  local info = string.format("pid %d (%s, started %s)", diloco.pid(), opts.command or "diloco-lua run", iso_now())
  local lock, lerr, code = diloco.lock_dir(out .. "/.lock", info)
  if not lock then
    if code == "DLC_ERR_STATE" then
      fail(1, "--out %s: another run is using this directory: %s; wait for it, stop it, or pick another --out",
        out, lerr)
    end
    fail(1, "--out %s: %s", out, lerr)
  end
  self.lock = lock
  local okp, perr = pcall(function()
    -- Writable?  (An existing .lock opens for writing even in a read-only directory.)
    local probe = string.format("%s/.probe.%d", out, diloco.pid())
    local f, ferr = io.open(probe, "w")
    if not f then fail(1, "--out %s: the directory is not writable: %s", out, ferr) end
    local wok, werr = f:write("ok")
    local cok, cerr = f:close()
    os.remove(probe)
    if not (wok and cok) then fail(1, "--out %s: the directory is not writable: %s", out, tostring(werr or cerr)) end

    self.removed_temps = remove_stale_temps(out)
    self:resolve(opts)
  end)
  if not okp then
    self:close()
    error(perr, 0)
  end
  return self
end

-- Whether the run in out saved nothing: no checkpoint (ckpts: M.checkpoints(out)), no
-- model file, and a metrics file that is missing or empty.
function M.never_saved(out, ckpts)
  if #(ckpts or M.checkpoints(out)) > 0 then return false end
  for _, name in ipairs { "model.safetensors", M.LEGACY_CHECKPOINT } do
    if exists(out .. "/" .. name) then return false end
  end
  local path = out .. "/metrics.jsonl"
  local _, kind, size = diloco.file_id(path)
  if kind == nil or (kind == "file" and size == 0) then return true end
  -- a run that failed while it started wrote one line: its summary, failed_at "start"
  if kind ~= "file" or size > 65536 then return false end
  local f = io.open(path, "r")
  if not f then return false end
  local first, second = f:read("l"), f:read("l")
  f:close()
  return second == nil and first ~= nil and first:find('"event":"summary"', 1, true) ~= nil
    and first:find('"failed_at":"start"', 1, true) ~= nil
end

-- The diloco.step of a safetensors file's metadata (its header only), or nil.
local function file_step(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local head = f:read(8)
  local n = head and #head == 8 and string.unpack("<I8", head)
  local json = n and n > 0 and n < (1 << 26) and f:read(n)
  f:close()
  local ok, h = pcall(diloco.json_decode, json or "")
  local meta = ok and type(h) == "table" and h.__metadata__
  return type(meta) == "table" and math.tointeger(tonumber(meta["diloco.step"] or "")) or nil
end

-- A save cut short (a kill between the checkpoint's rename and the model's, M:save)
-- leaves its checkpoint whole and in place, newer than model.safetensors: the newest
-- complete state is that checkpoint (it holds the model too), so nothing is removed;
-- returns {step, path, model_step} for the caller to write the model of that step again
-- once it has loaded it (nil: the model is of the newest checkpoint's step, or there is
-- no model file to compare with).
local function model_behind(out, newest)
  if not newest then return nil end
  local mstep = file_step(out .. "/model.safetensors")
  if not mstep or newest.step <= mstep then return nil end
  return { step = newest.step, path = newest.path, model_step = mstep }
end

-- The newest complete checkpoint of ckpts (its header and size check out: each save is
-- atomic, so only a file damaged after it was written fails), and the newer ones that
-- did not, each {name, why}: kept on disk, never removed (losing work is the user's call).
local function newest_complete(ckpts)
  local skipped = {}
  for i = #ckpts, 1, -1 do
    local meta, err = diloco.safetensors_meta(ckpts[i].path)
    if type(meta) == "table" then return ckpts[i], skipped end
    skipped[#skipped + 1] = { name = ckpts[i].name, why = tostring(err) }
  end
  return nil, skipped
end

-- Removes the other shards' checkpoints (lua/diloco/shards.lua: checkpoint-STEP.shard-K.
-- safetensors, beside shard 1's checkpoint-STEP.safetensors) whose set is gone.
local function remove_sides(out)
  for _, f in ipairs(diloco.listdir(out) or {}) do
    local step = f:match("^checkpoint%-(%d+)%.shard%-%d+%.safetensors$")
    if step and not exists(out .. "/checkpoint-" .. step .. ".safetensors") then os.remove(out .. "/" .. f) end
  end
end

-- Decides resume_path, metrics_path and whether the metrics are appended.
function M:resolve(opts)
  local out = self.out
  local ckpts = M.checkpoints(out)
  local present = {}
  for _, name in ipairs(RUN_FILES) do
    if exists(out .. "/" .. name) then present[#present + 1] = name end
  end
  for _, c in ipairs(ckpts) do present[#present + 1] = c.name end

  if opts.resume == "latest" then
    local last, skipped = newest_complete(ckpts)
    if #skipped > 0 then self.skipped = skipped end
    if last then
      self.resume_path = last.path
      self.model_behind = model_behind(out, last)
    elseif exists(out .. "/" .. M.LEGACY_CHECKPOINT) then
      self.resume_path = out .. "/" .. M.LEGACY_CHECKPOINT
    elseif #skipped > 0 then
      local why = {}
      for _, k in ipairs(skipped) do why[#why + 1] = k.why end
      fail(2, "--resume latest: %s holds no complete checkpoint to resume from (%s)", out, table.concat(why, "; "))
    else
      fail(2, "--resume latest: %s holds no checkpoint (checkpoint-STEP.safetensors) to resume from", out)
    end
  elseif opts.resume ~= nil then
    if opts.resume == "" then fail(2, "--resume: expected a checkpoint path or 'latest', got an empty string") end
    if not exists(opts.resume) then fail(2, "--resume %s: no such file", opts.resume) end
    self.resume_path = opts.resume
  elseif #present > 0 and not opts.append and not opts.overwrite and M.never_saved(out, ckpts) then
    -- a run killed while it started (its recipe.json, an empty metrics file, no step
    -- saved) or one that failed then (its summary alone): nothing to resume or lose, so
    -- the next run takes the directory over
    for _, name in ipairs(present) do os.remove(out .. "/" .. name) end
    remove_sides(out)
    self.took_over = present
  elseif #present > 0 and not opts.append then
    if not opts.overwrite then
      table.sort(present)
      fail(2, "--out %s already holds a run (%s): %s--overwrite replaces it, --out DIR picks another directory",
        out, table.concat(present, ", "), opts.resumable == false and "" or
        ((opts.resume_hint or "--resume latest") .. " continues it, "))
    end
    for _, name in ipairs(present) do os.remove(out .. "/" .. name) end
    remove_sides(out)
    self.overwritten = present
  end

  self.metrics_path = opts.metrics or (out .. "/metrics.jsonl")
  local mp = self.metrics_path
  if mp == "" then fail(2, "--metrics: expected a file path, got an empty string") end
  local mid, mkind, msize = diloco.file_id(mp)
  if mp:match("%.safetensors$") or (mkind == "file" and looks_like_safetensors(mp)) or
      (self.resume_path and mid and mid == diloco.file_id(self.resume_path)) then
    fail(2, "--metrics %s: names a checkpoint or model file; metrics go to a .jsonl file of their own", mp)
  end
  -- A metrics file of another run outside OUT is kept unless resuming or overwriting.
  if opts.metrics and mkind == "file" and msize > 0 and not self.resume_path and not opts.overwrite then
    fail(2, "--metrics %s already exists: --resume appends to it, --overwrite replaces it", mp)
  end
  self.append = self.resume_path ~= nil or (opts.append and #present > 0) or false
end

-- Writes an auxiliary text file atomically (temporary name, then rename).
function M:write_file(name, text)
  local path = self.out .. "/" .. name
  local tmp = string.format("%s.tmp.%d.0", path, diloco.pid())
  local f, err = io.open(tmp, "w")
  if not f then return nil, string.format("%s: %s", path, err) end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not (ok and cok) then
    os.remove(tmp)
    return nil, string.format("%s: %s", path, tostring(werr or cerr))
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    return nil, string.format("%s: %s", path, rerr)
  end
  return true
end

-- Saves step: write_checkpoint(path) then write_model(path), each true | nil, err.
-- Returns { path, kept, removed } or nil, err; on failure the previous pair stays.
function M:save(step, write_checkpoint, write_model)
  local name = M.checkpoint_name(step)
  local path = self.out .. "/" .. name
  local ok, err = write_checkpoint(path)
  if not ok then return nil, err end
  ok, err = write_model(self.out .. "/model.safetensors")
  if not ok then
    os.remove(path) -- model.safetensors is still the old one: so is the newest checkpoint
    return nil, err
  end
  local removed = {}
  local list = M.checkpoints(self.out)
  for i = 1, #list - self.keep do
    if list[i].name ~= name and os.remove(list[i].path) then removed[#removed + 1] = list[i].name end
  end
  remove_sides(self.out)
  if os.remove(self.out .. "/" .. M.LEGACY_CHECKPOINT) then removed[#removed + 1] = M.LEGACY_CHECKPOINT end
  return { path = path, removed = removed }
end

function M:close()
  if self.lock then
    self.lock:close()
    self.lock = nil
  end
end

return M

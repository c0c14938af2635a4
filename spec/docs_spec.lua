-- Docs that cannot rot: every code sample in README.md and docs/*.md is extracted and
-- run, with its shown output compared; docs/lua-api.md names only what exists and has a
-- help entry, and names every function of the module.  The conventions are in
-- docs/testing.md, "Code samples in the docs".
local diloco = require "diloco"
local H = require "spec.helpers"
local help = require "diloco.help"

local LUA = os.getenv("DILOCO_LUA") or "build/diloco-lua"
-- the tree the specs run from (ctest's working directory; $PWD is the caller's)
local ROOT = (function()
  local p = assert(io.popen("pwd"))
  local dir = p:read("l")
  p:close()
  return dir
end)()

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function doc_files()
  local files = { "README.md" }
  local names = assert(diloco.listdir("docs"))
  table.sort(names)
  for _, n in ipairs(names) do
    if n:match("%.md$") then files[#files + 1] = "docs/" .. n end
  end
  return files
end

local RUNNERS = { lua = true, sh = true, console = true }

-- A shell sample that runs may only run diloco-lua: setup, builds, installs, fuzzing
-- and long runs are marked norun, and nothing else is ever started by this spec.
local function assert_only_diloco(b)
  local text = b.text:gsub("\\\n", " ")
  for line in (text .. "\n"):gmatch("(.-)\n") do
    local cmd = b.lang == "console" and line:match("^%$ (.*)$") or (b.lang == "sh" and line) or nil
    if cmd and cmd:match("%S") and not cmd:match("^%s*#") then
      assert(cmd:match("^%s*diloco%-lua%s") or cmd:match("^%s*build/diloco%-lua%s"),
        ("%s:%d: a shell sample that runs may only run diloco-lua (mark it norun): %s"):format(b.file, b.line, cmd))
    end
  end
end
local NOT_CODE = { [""] = true, text = true }
local OTHER_CODE = { c = true, cmake = true, python = true } -- fragments of C, CMake, Python: not run here

-- Fenced blocks: { file, line, lang, tags = {norun = true, ...}, text, output = text of
-- a ```text block that follows with only blank lines between }.
local function blocks_of(file)
  local lines = {}
  for l in (read(file) .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = l end
  local out, i = {}, 1
  while i <= #lines do
    local info = lines[i]:match("^```(.*)$")
    if info then
      local words = {}
      for w in info:gmatch("%S+") do words[#words + 1] = w end
      local b = { file = file, line = i, lang = words[1] or "", tags = {} }
      for k = 2, #words do b.tags[words[k]] = true end
      local body = {}
      i = i + 1
      while i <= #lines and not lines[i]:match("^```%s*$") do
        body[#body + 1] = lines[i]
        i = i + 1
      end
      b.text = table.concat(body, "\n")
      b.close = i
      out[#out + 1] = b
    end
    i = i + 1
  end
  -- a ```text block right after a code block is that block's output
  for k = 2, #out do
    local prev, b = out[k - 1], out[k]
    if b.lang == "text" and not NOT_CODE[prev.lang] then
      local between = true
      for j = prev.close + 1, b.line - 1 do
        if lines[j]:match("%S") then between = false end
      end
      if between then
        prev.output = b.text
        b.is_output = true
      end
    end
  end
  return out
end

local function trim_lines(s)
  s = s:gsub("[ \t]+\n", "\n"):gsub("[ \t]+$", "")
  return (s:gsub("\n+$", ""))
end

-- The scratch directory a sample runs in: recipes/ and scripts/ of the tree, the
-- fixtures, and diloco-lua on PATH (build/diloco-lua in a sample means it too).
local function sandbox()
  local S = H.scratch()
  for _, d in ipairs { "recipes", "scripts", "ctest" } do
    os.execute(("ln -s '%s/%s' '%s/%s'"):format(ROOT, d, S.dir, d))
  end
  os.execute(("mkdir -p '%s/bin' '%s/build' && ln -s '%s' '%s/bin/diloco-lua' && ln -s '%s' '%s/build/diloco-lua'")
    :format(S.dir, S.dir, LUA, S.dir, LUA, S.dir))
  return S
end

-- `print(...)  --> shown` lines are checks: what that print writes must be what the
-- comment shows (runs of blanks, tabs included, compare as one space).
local EXPECT_PRELUDE = [[
-- a sample that reads a global nobody set (x, y, m, nn, ...) fails instead of going on
-- with nil, as docs/data.md's shard = m once did
setmetatable(_G, { __index = function(_, k)
  error(("the sample reads the undefined global '%s'"):format(tostring(k)), 2)
end })
function __doc_expect(line, shown, ...)
  local parts = {}
  for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
  local got = table.concat(parts, "\t")
  print(got)
  local function norm(s) return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")) end
  if norm(got) ~= norm(shown) then
    io.stderr:write(("DOC_EXPECT line %d: the sample shows %s but it prints %s\n"):format(line, shown, got))
  end
end]]

local function with_expectations(code)
  local out, n = {}, 0
  local ln = 0
  for line in (code .. "\n"):gmatch("(.-)\n") do
    ln = ln + 1
    local before, shown = line:match("^(.-)%s*%-%->%s*(.-)%s*$")
    if before then
      local indent, args = before:match("^(%s*)print(%b())%s*$")
      assert(args, ("line %d: a --> comment must follow print(...): %s"):format(ln, line))
      out[#out + 1] = ("%s__doc_expect(%d, %q, %s)"):format(indent, ln, shown, args:sub(2, -2))
      n = n + 1
    else
      out[#out + 1] = line
    end
  end
  return table.concat(out, "\n"), n
end

local function run_lua(b, S)
  local code, checks = with_expectations(b.text)
  S.write("prelude.lua", EXPECT_PRELUDE)
  local path = S.write("sample.lua", code)
  local out, status = H.sh(("cd '%s' && PATH='%s/bin':$PATH %s -e 'dofile(\"prelude.lua\")' %s 2>&1")
    :format(S.dir, S.dir, LUA, path))
  return out, status, checks
end

-- A REPL transcript: "> " lines are typed, the others are what the REPL prints.
local function run_repl(b, S)
  local input, want = {}, {}
  for line in (b.text .. "\n"):gmatch("(.-)\n") do
    local typed = line:match("^> (.*)$") or line:match("^>$") and ""
    if typed then
      input[#input + 1] = typed
    else
      want[#want + 1] = line
    end
  end
  local path = S.write("input.lua", table.concat(input, "\n") .. "\n")
  local out, status = H.sh(("(cd '%s' && cat %s | %s -i)"):format(S.dir, path, LUA))
  -- the piped REPL echoes no input: drop the banner and the prompts before each output
  local got = {}
  for line in out:gsub("^[^\n]*\n", ""):gmatch("[^\n]*") do
    local n
    repeat line, n = line:gsub("^>>? ", "") until n == 0
    got[#got + 1] = line
  end
  return table.concat(got, "\n"), status, table.concat(want, "\n")
end

local function run_sh(b, S)
  local path = S.write("sample.sh", "set -e\n" .. b.text .. "\n")
  return H.sh(("cd '%s' && PATH='%s/bin':$PATH sh %s"):format(S.dir, S.dir, path))
end

-- A console session: "$ " lines are commands, the lines after one its output.
local function run_console(b, S)
  local script, want = {}, {}
  for line in (b.text .. "\n"):gmatch("(.-)\n") do
    local cmd = line:match("^%$ (.*)$")
    if cmd then script[#script + 1] = cmd else want[#want + 1] = line end
  end
  local path = S.write("sample.sh", "set -e\n" .. table.concat(script, "\n") .. "\n")
  local out, status = H.sh(("cd '%s' && PATH='%s/bin':$PATH sh %s"):format(S.dir, S.dir, path))
  return out, status, table.concat(want, "\n")
end


local all = {}
for _, f in ipairs(doc_files()) do
  for _, b in ipairs(blocks_of(f)) do all[#all + 1] = b end
end

local tally = { run = 0, checks = 0, compared = 0, skipped = {}, c = 0, text = 0 }

describe("docs samples", function()
  it("are found", function()
    assert.is_true(#all > 40, "found only " .. #all .. " fenced blocks")
  end)

  it("use only the documented fence languages and tags", function()
    for _, b in ipairs(all) do
      local where = b.file .. ":" .. b.line
      assert(RUNNERS[b.lang] or NOT_CODE[b.lang] or OTHER_CODE[b.lang],
        where .. ": fence language '" .. b.lang .. "' (expected lua, sh, console, c, cmake, python, text or none)")
      -- after norun, a launch block's words for scripts/doc_commands (docs/testing.md)
      local LAUNCH = { hosts = true, cluster = true, slurm = true, ["local"] = true, long = true }
      for tag in pairs(b.tags) do
        local launch = b.tags.norun and (LAUNCH[tag] or tag:match("^islands=%d+$") or tag:match("^test:[%w_]+$"))
        assert(tag == "norun" or (tag == "repl" and b.lang == "lua") or launch,
          where .. ": unknown tag '" .. tag .. "' (norun, repl for lua, and after norun hosts, cluster, slurm, "
          .. "local, long, test:NAME or islands=K)")
      end
      if NOT_CODE[b.lang] and not b.is_output then
        -- a shell or REPL session hidden in a plain block would never be run
        for line in (b.text .. "\n"):gmatch("(.-)\n") do
          assert(not line:match("^%$ ") and not line:match("^> "),
            where .. ": a plain block holds a session line ('" .. line .. "'): fence it as console or lua repl")
        end
      end
    end
  end)

  for _, b in ipairs(all) do
    local where = b.file .. ":" .. b.line
    if OTHER_CODE[b.lang] then
      tally.c = tally.c + 1
    elseif NOT_CODE[b.lang] then
      tally.text = tally.text + 1
    elseif b.tags.norun then
      tally.skipped[#tally.skipped + 1] = where
    else
      it(where .. " (" .. b.lang .. (b.tags.repl and " repl" or "") .. ") runs" ..
        (b.output and " and prints what it shows" or ""), function()
        if b.lang == "sh" or b.lang == "console" then assert_only_diloco(b) end
        local S = sandbox()
        local out, status, want, checks
        if b.lang == "lua" and b.tags.repl then
          out, status, want = run_repl(b, S)
        elseif b.lang == "lua" then
          out, status, checks = run_lua(b, S)
        elseif b.lang == "console" then
          out, status, want = run_console(b, S)
        else
          out, status = run_sh(b, S)
        end
        S.cleanup()
        tally.run = tally.run + 1
        tally.checks = tally.checks + (checks or 0)
        assert(status == 0, where .. ": exit status " .. tostring(status) .. "\n" .. out)
        assert(not out:find("DOC_EXPECT"), where .. ": " .. out)
        want = want or b.output
        if want and want:match("%S") then
          tally.compared = tally.compared + 1
          assert.are.equal(trim_lines(want), trim_lines(out), where .. ": the output differs from the doc")
        end
      end)
    end
  end

  it("lists what was not run", function()
    print(("\ndocs samples: %d run (%d outputs compared, %d --> checks), %d marked norun, %d C/CMake "
      .. "fragments and %d plain blocks not run"):format(tally.run, tally.compared, tally.checks, #tally.skipped, tally.c, tally.text))
    print("norun: " .. table.concat(tally.skipped, " "))
    assert.is_true(tally.run > 0)
  end)
end)

describe("the sandbox of a sample", function()
  it("has the tree's recipes and diloco-lua on the PATH", function()
    local S = sandbox()
    local out, status = run_sh({ text = "test -f recipes/charlm.lua\ndiloco-lua -e 'print(1 + 1)'" }, S)
    S.cleanup()
    assert.are.equal(0, status, out)
    assert.are.equal("2", trim_lines(out))
  end)
end)

describe("the --> convention", function()
  it("fails a sample whose shown value is wrong, a --> that follows no print, and one that reads an undefined global", function()
    local S = sandbox()
    local out = run_lua({ text = "local x = 1 + 1\nprint(x) --> 3\nprint(x, 'a') --> 2 a\nprint(x)" }, S)
    local undefined, status = run_lua({ text = "local t = diloco.TextData { path = fortunes }" }, S)
    S.cleanup()
    assert.are_not.equal(0, status)
    assert.matches("the sample reads the undefined global 'fortunes'", undefined, 1, true)
    assert.matches("DOC_EXPECT line 2: the sample shows 3 but it prints 2", out, 1, true)
    assert.is_nil(out:find("line 3", 1, true))
    assert.matches("must follow print%(%.%.%.%)", H.error_of(with_expectations, "local y = 1 --> 1"))
  end)
end)

-- Users have only the repository: every document that the docs and the code's comments
-- cite (a NAME.md) is a file in it.
local function cited_missing(text)
  local missing = {}
  for token in text:gmatch("[%w_./%-]+%.md") do
    -- "/docs/x.md" is code joining a path; PREFIX/... an installed copy
    if not token:match("^/") and not token:match("PREFIX") then
      local path = token:gsub("^%./", "")
      if not (diloco.file_id(ROOT .. "/" .. path) or diloco.file_id(ROOT .. "/docs/" .. path)) then
        missing[#missing + 1] = token
      end
    end
  end
  return missing
end

describe("citations of documents", function()
  it("name only documents that are in the repository", function()
    local files = doc_files()
    for _, dir in ipairs { "lua", "lua/diloco", "core", "core/include/diloco", "net", "rt", "recipes", "scripts" } do
      for _, n in ipairs(diloco.listdir(dir) or {}) do
        if n:match("%.[ch]$") or n:match("%.lua$") then files[#files + 1] = dir .. "/" .. n end
      end
    end
    local bad = {}
    for _, f in ipairs(files) do
      for _, m in ipairs(cited_missing(read(f))) do bad[#bad + 1] = f .. ": " .. m end
    end
    assert(#bad == 0, "cited but not in the repository: " .. table.concat(bad, "; "))
    assert(#files > 40, "the scan read " .. #files .. " files")
  end)

  it("catch a citation of a document that does not exist", function()
    assert.are.same({ "docs/no-such-guide.md" }, cited_missing("see docs/no-such-guide.md and docs/sim.md"))
  end)
end)

-- docs/lua-api.md against the module: every diloco.NAME it mentions exists and has a
-- help entry, and every function and type of the module is mentioned.
describe("docs/lua-api.md", function()
  local text = read("docs/lua-api.md")

  it("names only functions and modules that exist and have a help entry", function()
    local seen = {}
    for name in text:gmatch("diloco%.([%a_][%w_%.]*)") do
      name = name:gsub("%.$", "")
      -- diloco.X, diloco.NAME: placeholders; diloco.h, diloco.so, ...: files
      if not seen[name] and not name:match("^%u+$") and not name:match("^[hc]$") and name ~= "so" and name ~= "pc" then
        seen[name] = true
        local ok, v = pcall(function()
          local x = diloco
          for part in name:gmatch("[^%.]+") do x = x[part] end
          return x
        end)
        assert(ok and v ~= nil, "docs/lua-api.md names diloco." .. name .. ", which does not exist")
        assert(help.text("diloco." .. name), "diloco." .. name .. " has no help entry")
      end
    end
    assert.is_true(next(seen) ~= nil)
  end)

  it("mentions every function and type of the diloco module", function()
    local missing = {}
    for _, e in ipairs(help.walk()) do
      local short = e.name:match("^diloco%.([%a_][%w_]*)$")
      if short and e.kind == "function" or e.kind == "type" then
        local word = short or e.name
        if not text:find("%f[%w_]" .. word .. "%f[^%w_]") then missing[#missing + 1] = e.name end
      end
    end
    assert(#missing == 0, "docs/lua-api.md does not mention: " .. table.concat(missing, ", "))
  end)
end)

describe("docs/testing.md", function()
  it("states no test count (it would rot) and says how to get one", function()
    local t = read("docs/testing.md")
    assert.is_nil(t:match("%d+ tests"), "docs/testing.md states a number of tests")
    assert.matches("`ctest %-N` in a\nbuild directory lists every test", t)
  end)
end)

describe("docs/recipes.md", function()
  it("holds the table `diloco-lua run --fields` prints, as the schema says it now", function()
    local t = read("docs/recipes.md")
    local head = "`diloco-lua run --fields` prints this table (`diloco.recipe.describe_schema()`).\n\n```\n"
    local i = assert(t:find(head, 1, true), "docs/recipes.md: the --fields table's heading is gone")
    local body = t:sub(i + #head, assert(t:find("\n```", i + #head, true)))
    local want = table.concat(require("diloco.recipe").describe_schema(), "\n") .. "\n"
    assert.are.equal(want, body,
      "docs/recipes.md's table differs from `diloco-lua run --fields`: paste its output there")
  end)
end)

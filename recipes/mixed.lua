-- mixed: mixed hardware.  Two fast islands and two at half their speed train the charlm
-- GPT with Decoupled DiLoCo on the virtual-time driver.  Nobody waits for the slow ones:
-- with quorum 1 and the adaptive grace window (docs/algorithm.md §4.3) a fragment merges as
-- soon as one island sent it and the window closes before anyone needs the result; the
-- tokens^2/steps weights give each island's contribution the weight of the work in it.
--   diloco-lua sim recipes/mixed.lua
--   diloco-lua sim recipes/mixed.lua --set sync.quorum=all     # the blocking comparison
-- Compare the summary's idle shares (one per island) and the virtual time to a loss.

-- recipes/decoupled.lua, read from beside this file, with other islands, steps and evals:
-- charlm's GPT, data and AdamW, the Nesterov outer step, and sync.preset = "decoupled",
-- which fills the rest (H = 24, 4 fragments, tau = 2, quorum 1, adaptive grace,
-- tokens^2/steps, RDA), so --set sync.preset=... switches all.  A recipe is Lua: it may
-- build on another like this, the file's table and then the fields that differ
-- (docs/recipes.md).  To copy this recipe elsewhere, copy decoupled.lua beside it, or
-- write its fields into a diloco.recipe { ... } here.  Set below: the islands' speeds, the
-- steps, the evals and a hook that prints who entered a merge.
local r = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "decoupled.lua")
-- islands 1 and 2 run a step per virtual second, 3 and 4 one every two seconds
r.islands = { { speed = 1 }, { speed = 1 }, { speed = 0.5 }, { speed = 0.5 },
  step_time = "1s", latency = "20ms", bandwidth = "2.5Gbps" }
r.steps = 1000            -- 1000 virtual seconds: 1000 steps for a fast island, 500 for a slow one
r.eval = { every = 100, batches = 32 }
r.hooks = {
  -- print who entered each merge of fragment 1 (a recipe may script anything here)
  on_merge = function(info)
    if info.fragment == 1 and info.version % 10 == 0 then
      local who = {}
      for _, c in ipairs(info.contributors) do who[#who + 1] = string.format("%d(%.2g)", c.learner, c.weight) end
      io.stderr:write(string.format("fragment 1 v%d at %.0fs: %s\n", info.version, info.virtual_s,
        table.concat(who, " ")))
    end
  end,
}
return r

-- diloco.commands: the option table of every subcommand of diloco-lua and of the
-- interpreter itself, as plain data: the parser, every --help text and the docstring
-- registry (diloco.cli, diloco.help) read it, and docs/cli.md describes it.
local M = {}

-- The option tables.  A command: name, args (the positional part of its synopsis),
-- summary (one line, for the top-level --help), about (paragraph lines), options, exit
-- (what its statuses mean), available (false: reserved for a later issue).  An option:
--   name     the long name (--name)
--   arg      the value's placeholder; absent for a flag (which takes no value)
--   list     repeatable, the values collected in order
--   default  the value the parser fills in when the option is absent
--   shown    how the help states the default when it is not a plain value
--   type     "integer" or "number": the parser converts the value and checks min..max
--   doc      what it does
-- A paragraph written as a long string: each line break, with the indentation after it,
-- reads as one space, or two after a full stop (the help's sentence spacing).
local function para(s)
  return (s:gsub("^%s+", ""):gsub("%.\n%s*", ".  "):gsub("\n%s*", " "))
end

local COMMON_TAIL = {
  { name = "debug", doc = "on an internal error, print the Lua traceback" },
  { name = "help", doc = "print this help and exit" },
}
local function with_tail(options)
  for _, o in ipairs(COMMON_TAIL) do options[#options + 1] = o end
  return options
end

-- The options several commands share: --set, --out and --overwrite (each command's own doc
-- where they say different things, the common one where not).
local function set_opt(doc)
  return { name = "set", arg = "KEY=VALUE", list = true, shown = "none",
           doc = doc or "override a recipe field; repeatable" }
end
local function out_opt(doc, shown)
  return { name = "out", arg = "DIR", shown = shown or "the recipe's out, else runs/NAME", doc = doc }
end
local function overwrite_opt(doc) return { name = "overwrite", doc = doc or "replace the run already in OUT" } end

-- The options run and sim (the two commands that train a recipe) share word for word.
local METRICS_OPT = { name = "metrics", arg = "FILE.jsonl", shown = "OUT/metrics.jsonl",
                      doc = "write the JSON-lines metrics here" }
local QUIET_OPT = { name = "quiet", doc = "no progress output; print the summary as JSON at the end" }
local FIELDS_OPT = { name = "fields", doc = "list every recipe field with its default and meaning, and exit" }

local RUN_EXIT = "0 done, 1 failed (saved what it could), 2 bad recipe or options, 128 + N stopped by signal N "
  .. "after saving (130 SIGINT, 143 SIGTERM, 129 SIGHUP)"

M.commands = {
  {
    name = "run", args = "RECIPE.lua", summary = "train a recipe: one island, or several as processes",
    about = { para [[
      Trains the recipe.  One island (islands.count = 1) trains in this process.  Several islands run for
      real: this process serves the syncer on loopback and starts islands.count learner processes (`diloco-lua
      learner`, one compute thread each unless the recipe's threads says otherwise), restarts those that
      crash, and executes the recipe's chaos on them (kill, pause); OUT gets learner-N/ for each.
      docs/runtime.md.  The same recipe on the virtual-time driver: `diloco-lua sim RECIPE`.  docs/recipes.md
      lists every field.]] },
    options = with_tail {
      set_opt "override a recipe field, nested with dots (--set inner.lr=1e-3); repeatable",
      out_opt "run directory: metrics.jsonl, recipe.json, checkpoint-STEP.safetensors, model.safetensors",
      { name = "resume", arg = "latest|CHECKPOINT", shown = "none: a new run",
        doc = "continue the run in OUT from its newest checkpoint (or the given one); the metrics are appended to" },
      overwrite_opt "replace the run already in OUT (without it, an existing run is refused)",
      METRICS_OPT, QUIET_OPT, FIELDS_OPT,
    },
    exit = RUN_EXIT,
  },
  {
    name = "sim", args = "RECIPE.lua", summary = "train a recipe's islands on the virtual-time simulator",
    about = { para [[
      Trains the recipe's islands (islands.count learners and the syncer, sync.preset) in one process on a
      simulated clock and network: every inner step is real, time and links are virtual (islands.step_time,
      speed, latency, bandwidth), faults come from chaos.  The same recipe and seed give the same metrics
      (wall-clock fields aside).  docs/sim.md.]] },
    options = with_tail {
      set_opt "override a recipe field (--set sync.preset=diloco --set islands.count=4); repeatable",
      out_opt "run directory: metrics.jsonl, recipe.json, model.safetensors (the global model, for sample)",
      overwrite_opt(),
      METRICS_OPT, QUIET_OPT, FIELDS_OPT,
      { name = "resume", arg = "CHECKPOINT", shown = "none",
        doc = "refused (exit 2): a sim is not resumed, the same recipe and seed give the same run again" },
      { name = "replay", arg = "OUT", shown = "none",
        doc = "re-execute the finished real run in OUT from its merge tape (its recipe from OUT/tape.json, or the "
          .. "RECIPE given) and compare its final global parameters with OUT/model.safetensors bit for bit: exit "
          .. "0 when they match, 1 when they differ or the replay diverged (docs/runtime.md)" },
    },
    exit = RUN_EXIT,
  },
  {
    name = "sample", args = "MODEL.safetensors", summary = "generate text from a trained byte-level GPT",
    about = { para [[
      Generates bytes from a GPT saved by run or sim.  The file is treated as hostile: its diloco.model
      metadata is validated like a recipe's model section and the model's memory estimated before anything is
      built (exit 2), then every tensor is checked (a bad file: exit 1).]] },
    options = with_tail {
      { name = "prompt", arg = "TEXT", default = "\n", shown = '"\\n"', doc = "the text the model continues (not empty)" },
      { name = "tokens", arg = "N", type = "integer", min = 1, max = 1e6, default = 200, doc = "bytes to generate" },
      { name = "temperature", arg = "T", type = "number", min = 0, max = 100, default = 0.8,
        doc = "softmax temperature (0 = greedy)" },
      { name = "top-k", arg = "K", type = "integer", min = 1, max = 256, shown = "all 256",
        doc = "sample among the K likeliest bytes only" },
      { name = "seed", arg = "S", type = "integer", min = 0, max = 2 ^ 53, default = 0, doc = "random seed" },
    },
    exit = "0 done, 1 a bad model file, 2 bad options, a missing file or model options out of range",
  },
  {
    name = "goodput", args = "", summary = "estimate the goodput of a large cluster under failures",
    about = { para [[
      Simulates a cluster under chip interruptions (docs/goodput.md) and prints one row per policy and per
      --sweep value: goodput and uptime as mean ± standard deviation over the seeds.  Durations take units ms,
      s, m, h, d, y (365 d).]] },
    options = with_tail {
      { name = "chips", arg = "N", shown = "1.2e6", doc = "chips in the cluster" },
      { name = "mtbi", arg = "DURATION", shown = "1y", doc = "mean time between interruptions, per chip" },
      { name = "learners", arg = "M", shown = "8", doc = "learners of the decoupled policy" },
      { name = "policy", arg = "P", shown = "all", doc = "dp, elastic-dp, decoupled or all" },
      { name = "days", arg = "D", shown = "30", doc = "simulated days" },
      { name = "seed", arg = "S", shown = "0", doc = "first seed" },
      { name = "seeds", arg = "K", shown = "10", doc = "seeds S..S+K-1, for mean ± standard deviation (1..1000)" },
      { name = "sweep", arg = "KEY=V1,V2,...", shown = "none; chips=1e5,3e5,1.2e6,2.4e6 with --plot",
        doc = "one row per value of KEY: chips, learners, mtbi, repair, downscale, upscale, pause (both), step, "
          .. "checkpoint, restart, slice_chips" },
      set_opt "any other simulator parameter (diloco.goodput_defaults() lists them); repeatable",
      { name = "plot", arg = "FILE.png", shown = "none", doc = "draw goodput against chips for each policy (needs gnuplot)" },
      { name = "series", arg = "FILE.tsv", shown = "none", doc = "the time series (t, live chips, progress) of the first row" },
    },
    exit = "0 done, 1 failed (--plot without gnuplot: the table is printed), 2 bad options",
  },
  {
    name = "plot", args = "RUN_OR_METRICS...", summary = "draw the metrics of runs: loss and eval curves, any field",
    about = { para [[
      Overlays the curves of one or several runs; each argument is a run directory (its metrics.jsonl) or a
      metrics file.  One curve per run, record kind (--events), field (--y) and, in a sim, learner; the points
      a resumed run redid are replaced by the newer ones.  With --out a PNG is drawn with gnuplot; without it,
      a text chart is printed on stdout (terminal width when stdout is one).  docs/plots.md.]] },
    options = with_tail {
      { name = "out", arg = "FILE.png", shown = "none: a text chart on stdout", doc = "write a PNG (gnuplot)" },
      { name = "kind", arg = "KIND", default = "curves",
        doc = "curves (the records' fields), or compute: where each island's time went (the summary's account), "
          .. "stacked bars, or a table without --out" },
      { name = "x", arg = "AXIS", default = "steps",
        doc = "steps, tokens, time (wall seconds since the file's first record), virtual (virtual_s of a sim) or "
          .. "any numeric field" },
      { name = "y", arg = "FIELD,...", default = "loss",
        doc = "numeric fields to draw (loss, grad_norm, lr, accuracy, contributors, ...), or KIND.FIELD for one "
          .. "kind; eval is eval.loss" },
      { name = "events", arg = "KIND,...", shown = "every kind but summary",
        doc = "record kinds to draw: step, eval, merge, fault, reject, checkpoint, resume" },
      { name = "title", arg = "TEXT", shown = "the runs' names", doc = "the chart's title" },
      { name = "log-y", doc = "logarithmic y axis" },
      { name = "size", arg = "WxH", default = "900x600", doc = "PNG size in pixels" },
      { name = "width", arg = "COLUMNS", type = "integer", min = 30, max = 1000, shown = "the terminal's, else 80",
        doc = "text chart width" },
      { name = "height", arg = "ROWS", type = "integer", min = 8, max = 500, default = 20, doc = "text chart height" },
    },
    exit = "0 drawn, 1 --out without gnuplot (the text chart is printed instead) or gnuplot failed, 2 bad "
      .. "options or an input that is not metrics",
  },
  {
    name = "compare", args = "RUN...", summary = "compare runs side by side: their summaries, their eval curves",
    about = { para [[
      Prints one row per run (a run directory of run or sim, or its metrics.jsonl) with the numbers of the
      summary that ends its metrics: preset, learners, final eval loss, goodput, uptime, idle (the mean over
      learners), merges, MB up and down, tokens, time (virtual seconds for a sim, wall seconds for a run) and
      a status (ok, error, interrupted, no summary); "-" where the summary has no such field.  With --plot
      each run's eval loss is drawn against --x into a PNG, one curve per run.  docs/cli.md.]] },
    options = with_tail {
      { name = "markdown", doc = "print the table as Markdown" },
      { name = "plot", arg = "FILE.png", shown = "none", doc = "draw each run's eval loss curve, overlaid (gnuplot)" },
      { name = "x", arg = "AXIS", shown = "tokens",
        doc = "the x axis of --plot: tokens, time (virtual seconds for a sim, wall seconds for a run), wall (wall "
          .. "seconds) or step" },
    },
    exit = "0 done, 1 --plot without gnuplot (the table is printed) or gnuplot failed, 2 bad options or an input "
      .. "that is not metrics",
  },
  {
    name = "syncer", args = "RECIPE.lua", summary = "serve a recipe's syncer over TCP, for learners of any launcher",
    about = { para [[
      Serves the recipe's syncer (the global model, merges, evaluation) until every one of islands.count
      learners has joined and left, then saves the global model in OUT.  Learners join with `diloco-lua
      learner RECIPE --connect HOST:PORT` (by hand, mpirun, srun: docs/cli.md).  The secret comes from
      --secret-file or DILOCO_SECRET, never the command line.]] },
    options = with_tail {
      { name = "listen", arg = "HOST:PORT", default = "127.0.0.1:0",
        doc = "address to listen on (port 0: any free port; 0.0.0.0:PORT for other hosts)" },
      { name = "advertise", arg = "HOST[:PORT]", shown = "the listen address (0.0.0.0: this host's routed one)",
        doc = "the address learners should connect to, written to --address-file (no port, or port 0: the bound one)" },
      { name = "address-file", arg = "FILE", shown = "none",
        doc = "write the address and run id here once listening (learners: --connect @FILE)" },
      { name = "secret-file", arg = "FILE", shown = "DILOCO_SECRET, else a fresh OUT/secret",
        doc = "the run's secret (both ends prove they know it)" },
      { name = "run-id", arg = "ID", shown = "the recipe's name", doc = "the run id learners must present" },
      { name = "shard", arg = "I/S", shown = "none: one syncer owns every fragment",
        doc = "serve shard I of S (docs/shards.md): the fragments dealt to it; OUT becomes OUT/shard-I; learners "
          .. "connect to every shard in order (--connect A,B or @FILE1,@FILE2); the secret must be shared" },
      { name = "standby-of", arg = "HOST:PORT|@FILE", shown = "none: a primary",
        doc = "serve as the standby of the syncer (or shard, with --shard) there (docs/shards.md, \"Standbys\"): hold "
          .. "its state from a replica of every merge and take over once it is unreachable for --lease; OUT "
          .. "becomes OUT-standby (the primary's OUT, suffixed); learners list it after '|' (--connect A|B)" },
      { name = "lease", arg = "SECONDS", type = "number", min = 0.05, max = 3600, shown = "runtime.timeout",
        doc = "a standby takes over after its primary has been unreachable this long" },
      { name = "tls-cert", arg = "PEM", shown = "none: plain TCP",
        doc = "TLS on every link: this server's certificate (with --tls-key); learners then need --tls-ca" },
      { name = "tls-key", arg = "PEM", shown = "none", doc = "the private key of --tls-cert" },
      set_opt(),
      out_opt "run directory: metrics.jsonl, recipe.json, model.safetensors",
      { name = "resume", doc = "continue the run in OUT from the syncer's newest checkpoint (OUT/syncer), with "
        .. "the next epoch: a restarted syncer; its learners reconnect and are resynced" },
      overwrite_opt(),
      METRICS_OPT, QUIET_OPT,
    },
    exit = "0 done, 1 failed, 2 bad recipe or options, 128 + N stopped by signal N (after a checkpoint)",
  },
  {
    name = "learner", args = "RECIPE.lua", summary = "join a syncer as one learner (island)",
    about = { para [[
      Trains one island of the recipe against a syncer (`diloco-lua syncer`, or the one `run` serves) until
      the run's step reaches steps, then leaves.  The id comes from --id, else the launcher's rank
      (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, minus --rank-offset), else the syncer assigns one.  A
      learner whose OUT holds a checkpoint continues its optimizer state and data cursor from it; the model
      always comes from the syncer.  With --id under a launcher of several ranks (`mpirun -np R diloco-lua
      learner RECIPE --connect ... --id N`) the learner is island N as one MPI job: its R ranks average their
      gradients each step, R x the batch, rank 0 talks to the syncer (docs/mpi.md).]] },
    options = with_tail {
      { name = "connect", arg = "HOST:PORT|@FILE", shown = "required",
        doc = "the syncer's address, or @FILE: the --address-file of the syncer; a sharded syncer: one per "
          .. "shard, in shard order, joined by commas; a syncer with a standby: both, joined by '|' (tried in turn)" },
      { name = "id", arg = "N", type = "integer", min = 1, max = 65536, shown = "the launcher's rank + 1",
        doc = "this learner's island, 1..islands.count" },
      { name = "rank-offset", arg = "K", type = "integer", min = 0, max = 65536, default = 0,
        doc = "launcher ranks below K are not learners (an MPMD line whose first rank is the syncer: 1)" },
      { name = "secret-file", arg = "FILE", shown = "DILOCO_SECRET", doc = "the run's secret" },
      { name = "run-id", arg = "ID", shown = "the address file's, else the recipe's name",
        doc = "the run id the syncer serves" },
      { name = "tls-ca", arg = "PEM", shown = "none: plain TCP",
        doc = "TLS to a syncer started with --tls-cert: the certificate (or CA) its certificate is checked against" },
      set_opt(),
      out_opt("this learner's directory: metrics.jsonl, checkpoints, model.safetensors (its local model)",
        "OUT/learner-N of the recipe's out"),
      overwrite_opt "start afresh: replace what OUT holds instead of continuing from its checkpoint",
      { name = "restart-at", arg = "STEP", type = "integer", min = 0, max = 1e15, shown = "none",
        doc = "continue from OUT's checkpoint of schedule step STEP, model included (0: the initial model); what "
          .. "run passes every learner of a non-elastic data-parallel run after a failure" },
      METRICS_OPT, QUIET_OPT,
    },
    exit = "0 done, 1 failed (a refusal by the syncer names the difference), 2 bad recipe or options, 128 + N "
      .. "stopped by signal N (after its last contributions and a checkpoint)",
  },
}
for _, c in ipairs(M.commands) do M.commands[c.name] = c end

-- The interpreter's own options, parsed by main.c (documented here for --help).
M.toplevel = {
  usage = { "diloco-lua [options] [script [args]]", "diloco-lua COMMAND [options] [args]" },
  options = {
    { name = "-e", arg = "CODE", doc = "run the Lua string CODE (repeatable, runs in order)" },
    { name = "-i", doc = "enter the REPL after running the script and -e code" },
    { name = "-v, --version", doc = "print the versions of diloco-lua, libdiloco and Lua, the gemm backend and "
      .. "the thread count" },
    { name = "-h, --help", doc = "print this help and exit" },
    { name = "--", doc = "stop handling options" },
    { name = "-", doc = "run stdin as the script and stop handling options" },
  },
  about = "With no arguments: a REPL with `diloco` loaded if stdin is a terminal, otherwise stdin is run as one "
    .. "chunk.",
  exit = "0 ok, 1 failed (a Lua error, a failed run), 2 usage or recipe error, 128 + N stopped by signal N "
    .. "(130 Ctrl-C)",
}

return M

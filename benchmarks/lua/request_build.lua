-- The plugin's request build (harp.request.build) per submission, in plain Lua 5.1, against what it
-- cost while it also read the batch script and hashed its #SBATCH lines (the script signature, now
-- harp.script_signature, the cli_filter hook's; no model has it: sacct records no script), measured in
-- the same run on the same job_desc.
--   lua5.1 benchmarks/lua/request_build.lua [PLUGIN_DIR] [BUILDS]
-- PLUGIN_DIR (default plugin): a checkout's plugin/ directory, one with harp/script_signature.lua.
-- Hot loops, the median of 9 rounds of BUILDS builds (default 5000); in slurmctld each read of
-- job_desc is a call into its C, and job_desc.script copies the whole script into Lua, which this
-- leaves out.
local dir = arg[1] or "plugin"
package.path = dir .. "/?.lua;" .. package.path
local request = require "harp.request"
local signature = require "harp.script_signature"
local clock = os.clock

local builds = tonumber(arg[2]) or 5000
local HEADERS = {
  -- bench_plugin's SCRIPT: three directives
  {"3 directives (bench_plugin's)", "#!/bin/sh\n#SBATCH -t 3-00:00:00\n#SBATCH -p debug\n#SBATCH -J bench\nsleep 1\n"},
  {"13 directives (a typical header)", table.concat({
    "#!/bin/bash", "#SBATCH --job-name=relax_Si_supercell", "#SBATCH --partition=batch",
    "#SBATCH --account=phys-2024001", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=64",
    "#SBATCH --cpus-per-task=1", "#SBATCH --mem=120G", "#SBATCH --time=1-12:00:00",
    "#SBATCH --output=%x-%j.out", "#SBATCH --error=%x-%j.err", "#SBATCH --mail-type=END,FAIL",
    "#SBATCH --mail-user=someone@example.org", "#SBATCH --exclusive", "", "module load qe",
    "srun pw.x -in relax.in", ""}, "\n")},
}

local function job_desc(script)
  return {
    user_name = "alice", user_id = 1000, name = "relax", partition = "batch", account = "phys",
    work_dir = "/home/alice/run", time_limit = 2160, time_min = 4294967294, min_mem_per_node = 122880,
    min_mem_per_cpu = 18446744073709551614, min_cpus = 128, cpus_per_task = 1, num_tasks = 128,
    min_nodes = 2, max_nodes = 2, tres_per_node = nil, array_inx = nil, script = script,
  }
end

local function median_us(step)
  local rounds = {}
  for r = 1, 9 do
    local t0 = clock()
    for _ = 1, builds do step() end
    rounds[r] = (clock() - t0) / builds * 1e6
  end
  table.sort(rounds)
  return rounds[5]
end

print(string.format("%-34s %12s %20s", "script", "build (µs)", "build + signature"))
for _, h in ipairs(HEADERS) do
  local jd = job_desc(h[2])
  local now = median_us(function() return request.build(jd, 1000) end)
  local before = median_us(function()
    local r = request.build(jd, 1000)
    r.script_signature = signature.of(jd.script)
    return r
  end)
  print(string.format("%-34s %12.1f %20.1f", h[1], now, before))
end

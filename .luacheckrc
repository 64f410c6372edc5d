-- luacheck for plugin/ and tests/lua (scripts/test runs it). slurmctld's Lua is 5.1 and hands the
-- plugin a global `slurm` table; job_submit.lua must define the two entry points as globals.
std = "lua51"
read_globals = { "slurm" }
max_line_length = 120

files["plugin/job_submit.lua"] = { globals = { "slurm_job_submit", "slurm_job_modify" } }
files["plugin/examples/site_job_submit.lua"] = {
  globals = { "slurm_job_submit", "slurm_job_modify" },
  unused_args = false, -- slurmctld's signatures: a site's own checks use them
}
-- The tests stand in for slurmctld: they set the `slurm` table the plugin reads.
files["tests/lua"] = { globals = { "slurm" } }

-- A site's own job_submit.lua that calls slurm-harp from inside its slurm_job_submit.
-- Copy the marked lines into your script; everything harp does stays under pcall and can only
-- lower limits or append a harp: tag, so your own checks keep the last word if they run after it.

-- >>> slurm-harp
local HARP_LIB = "/usr/share/slurm-harp/lua"
package.path = HARP_LIB .. "/?.lua;" .. package.path
local harp_ok, harp = pcall(require, "harp.main")
if harp_ok then
  harp_ok = pcall(harp.configure, {
    socket = "/run/slurm-harp/harp.sock",
    deadline_ms = 50,
    breaker_seconds = 30,
    disable_file = "/etc/slurm/harp.disable",
    log_prefix = "harp",
  })
end
if not harp_ok then slurm.log_error("%s", "harp: not loaded; jobs pass unchanged") end
-- <<< slurm-harp

function slurm_job_submit(job_desc, part_list, submit_uid)
  -- ... the site's own checks ...
  if harp_ok then pcall(harp.submit, job_desc, submit_uid, part_list) end -- >>> slurm-harp (one line)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

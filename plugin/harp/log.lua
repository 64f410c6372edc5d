-- Logging through slurmctld. slurm.log_* run string.format on their arguments, so a message is
-- always passed as "%s"; a failing logger must never take the submission down with it.

local pcall, tostring, type = pcall, tostring, type

local M = {prefix = "harp"}

local function emit(fn_name, msg)
  local slurm = _G.slurm
  local fn = type(slurm) == "table" and slurm[fn_name]
  if type(fn) ~= "function" then return false end
  return (pcall(fn, "%s", M.prefix .. ": " .. tostring(msg)))
end

function M.info(msg) return emit("log_info", msg) end
function M.error(msg) return emit("log_error", msg) or emit("log_info", msg) end
function M.debug(msg) return emit("log_debug", msg) end

-- Shown to the submitting user by sbatch/salloc; no prefix, the daemon wrote the text for users.
function M.user(msg)
  local slurm = _G.slurm
  local fn = type(slurm) == "table" and slurm.log_user
  if type(fn) ~= "function" then return false end
  return (pcall(fn, "%s", tostring(msg)))
end

return M

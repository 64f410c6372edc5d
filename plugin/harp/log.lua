-- Logging through slurmctld. slurm.log_* run string.format on their arguments, so a message is
-- always passed as "%s"; a failing logger must never take the submission down with it.

-- Every line is escaped: a job name with a newline must not forge lines in slurmctld.log.

local pcall, tostring, type = pcall, tostring, type
local gsub, byte, format, sub = string.gsub, string.byte, string.format, string.sub

local M = {prefix = "harp", MAX = 2048}

-- Control characters (C0, DEL) as \n, \r, \t or \xNN, and a backslash doubled; at most MAX bytes.
local NAMED = {["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\\"] = "\\\\"}
function M.escape(msg)
  local s = tostring(msg)
  if #s > M.MAX then s = sub(s, 1, M.MAX) .. "..." end
  return (gsub(s, "[%c\\]", function(c) return NAMED[c] or format("\\x%02x", byte(c)) end))
end

local function emit(fn_name, msg)
  local slurm = _G.slurm
  local fn = type(slurm) == "table" and slurm[fn_name]
  if type(fn) ~= "function" then return false end
  return (pcall(fn, "%s", M.prefix .. ": " .. M.escape(msg)))
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

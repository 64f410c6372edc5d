-- slurm-harp cli_filter/lua entry point (Slurm 22.05, Lua 5.1): at `sbatch`, one line of advice from
-- the daemon's advice socket when the user's own runs show a cheaper or faster way (docs/advice.md,
-- "At submission: the cli_filter hook"). A site copies it as cli_filter.lua beside slurm.conf and
-- sets CliFilterPlugins=lua; it stays silent until harp_advice.lua beside it says `enabled = true`.
-- It NEVER blocks or fails a submission: every function returns slurm.SUCCESS, any error means no line.
-- Users silence it with HARP_ADVICE=0; HARP_ADVICE_DEBUG=1 says why no line was printed.
-- Nothing is loaded until sbatch calls slurm_cli_pre_submit (srun and salloc only pay this file).

local pcall, type, pairs, tostring, loadfile, setfenv = pcall, type, pairs, tostring, loadfile, setfenv
local io_open, find, sub = io.open, string.find, string.sub

local DEFAULTS = {
  enabled = false,
  socket = "/run/slurm-harp/advice.sock",
  deadline_ms = 300,
  lib_dir = "/usr/share/slurm-harp/lua",
}

local function is_text(v) return type(v) == "string" and v ~= "" and not find(v, "%c") end
local VALID = {
  enabled = function(v) return type(v) == "boolean" end,
  socket = is_text,
  deadline_ms = function(v) return type(v) == "number" and v >= 1 and v <= 2000 end, -- the user waits
  lib_dir = is_text,
}

local function debug_on() return os.getenv("HARP_ADVICE_DEBUG") == "1" end
local function say(msg)
  if debug_on() then pcall(io.stderr.write, io.stderr, "harp: " .. tostring(msg):gsub("%c", "?") .. "\n") end
end

local function exists(path)
  local f = io_open(path, "r")
  if f then f:close() return true end
  return false
end

-- Directory of this script (cli_filter/lua loads it with luaL_loadfile: the source is "@/path").
local function own_dir()
  local info = debug.getinfo(1, "S")
  local src = info and info.source
  if type(src) ~= "string" or sub(src, 1, 1) ~= "@" then return nil end
  return src:sub(2):match("^(.*)/[^/]*$") or "."
end

-- Settings from harp_advice.lua beside this file (a chunk returning a table, run in an empty
-- environment). A bad key or value keeps the default; an unreadable file keeps the hook off.
local function load_config(dir)
  local cfg = {}
  for k, v in pairs(DEFAULTS) do cfg[k] = v end
  local path = dir and (dir .. "/harp_advice.lua")
  if not path or not exists(path) then return cfg end
  local chunk, err = loadfile(path)
  if not chunk then
    say("cannot load " .. path .. ": " .. tostring(err))
    return cfg
  end
  setfenv(chunk, {})
  local ok, t = pcall(chunk)
  if not ok or type(t) ~= "table" then
    say(path .. " must return a table")
    return cfg
  end
  for k, v in pairs(t) do
    if VALID[k] and VALID[k](v) then cfg[k] = v else say(path .. ": ignored " .. tostring(k)) end
  end
  cfg.explicit_lib = t.lib_dir ~= nil and cfg.lib_dir == t.lib_dir
  return cfg
end

local hook -- harp.advice_hook once loaded; false: off or failed (not tried again in this sbatch)

local function init()
  local dir = own_dir()
  local cfg = load_config(dir)
  if not cfg.enabled then return false end
  local lib = cfg.lib_dir
  if not cfg.explicit_lib and dir and exists(dir .. "/harp/advice_hook.lua") then lib = dir end
  local entry = lib .. "/?.lua"
  if not find(package.path, entry, 1, true) then package.path = entry .. ";" .. package.path end
  local ok, mod = pcall(require, "harp.advice_hook")
  if not ok then
    say("cannot load harp modules from " .. lib .. ": " .. tostring(mod))
    return false
  end
  if not pcall(mod.configure, cfg) then return false end
  return mod
end

local function success()
  return type(slurm) == "table" and slurm.SUCCESS or 0
end

function slurm_cli_setup_defaults(options, early_pass) -- luacheck: ignore 111 212
  return success()
end

local function kind(options) return options.type end

function slurm_cli_pre_submit(options, pack_offset) -- luacheck: ignore 111
  local okk, k = pcall(kind, options)
  if not okk or k ~= "sbatch" then return success() end
  if hook == nil then
    local ok, mod = pcall(init)
    hook = ok and mod or false
  end
  if hook then pcall(hook.pre_submit, options, pack_offset) end
  return success()
end

function slurm_cli_post_submit(offset, jobid, stepid) -- luacheck: ignore 111 212
  return success()
end

-- slurm-harp job_submit/lua entry point (slurmctld 22.05, Lua 5.1).
-- Asks the slurm-harp daemon for a decision on each submission and ALWAYS lets the job through:
-- any error, timeout or missing piece means the job is submitted exactly as the user asked.
-- Only two globals: slurm_job_submit and slurm_job_modify. Optional settings live in
-- harp_plugin.lua next to this file (a Lua chunk returning a table, see DEFAULTS).

local pcall, type, pairs, tostring, loadfile, setfenv = pcall, type, pairs, tostring, loadfile, setfenv
local io_open, find, sub, gsub, format = io.open, string.find, string.sub, string.gsub, string.format

local DEFAULTS = {
  socket = "/run/slurm-harp/harp.sock",
  deadline_ms = 50,
  breaker_seconds = 30,
  disable_file = "/etc/slurm/harp.disable",
  lib_dir = "/usr/share/slurm-harp/lua",
  log_prefix = "harp",
}

local function is_text(v) return type(v) == "string" and v ~= "" and not find(v, "%c") end
local function in_range(lo, hi)
  return function(v) return type(v) == "number" and v >= lo and v <= hi end
end
local VALID = {
  socket = is_text,
  deadline_ms = in_range(1, 1000), -- slurmctld holds its locks meanwhile
  breaker_seconds = in_range(0, 86400),
  disable_file = is_text,
  lib_dir = is_text,
  log_prefix = function(v) return type(v) == "string" and find(v, "^[%w_.%-]+$") ~= nil and #v <= 32 end,
}

local prefix = DEFAULTS.log_prefix
local function log(level, msg)
  local fn = type(slurm) == "table" and slurm["log_" .. level]
  -- One line whatever the message holds (require's error lists every path it tried, one a line).
  if type(fn) == "function" then pcall(fn, "%s", prefix .. ": " .. gsub(tostring(msg), "%c+", " ")) end
end

local function exists(path)
  local f = io_open(path, "r")
  if f then f:close() return true end
  return false
end

-- Directory of this script (slurmctld loads it with luaL_loadfile, so the source is "@/path").
local function own_dir()
  local info = debug.getinfo(1, "S")
  local src = info and info.source
  if type(src) ~= "string" or sub(src, 1, 1) ~= "@" then return nil end
  return src:sub(2):match("^(.*)/[^/]*$") or "."
end

local function load_config(dir)
  local cfg = {}
  for k, v in pairs(DEFAULTS) do cfg[k] = v end
  local path = dir and (dir .. "/harp_plugin.lua")
  if not path or not exists(path) then return cfg, false end
  local chunk, err = loadfile(path)
  if not chunk then
    log("error", "cannot load " .. path .. ": " .. tostring(err) .. "; using defaults")
    return cfg, false
  end
  setfenv(chunk, {}) -- a settings file has no business touching slurmctld's Lua state
  local ok, t = pcall(chunk)
  if not ok or type(t) ~= "table" then
    log("error", path .. " must return a table (" .. tostring(t) .. "); using defaults")
    return cfg, false
  end
  local explicit_lib = false
  for k, v in pairs(t) do
    if VALID[k] == nil then
      log("error", format("%s: unknown key %q ignored", path, tostring(k)))
    elseif VALID[k](v) then
      cfg[k] = v
      if k == "lib_dir" then explicit_lib = true end
    else
      log("error", format("%s: bad value %s for %q, keeping %s", path, tostring(v), k, tostring(cfg[k])))
    end
  end
  return cfg, explicit_lib
end

local main -- harp.main once loaded; nil means pure pass-through

local function init()
  local dir = own_dir()
  local cfg, explicit_lib = load_config(dir)
  prefix = cfg.log_prefix
  -- a checkout or an install that keeps harp/ next to this script wins over the default location
  local lib = cfg.lib_dir
  if not explicit_lib and dir and exists(dir .. "/harp/main.lua") then lib = dir end
  local entry = lib .. "/?.lua"
  if not find(package.path, entry, 1, true) then package.path = entry .. ";" .. package.path end
  local ok, mod = pcall(require, "harp.main")
  if not ok then
    log("error", "cannot load harp modules from " .. lib .. ": " .. tostring(mod) .. "; jobs pass unchanged")
    return
  end
  local okc, err = pcall(mod.configure, cfg)
  if not okc then
    log("error", "configuration failed: " .. tostring(err) .. "; jobs pass unchanged")
    return
  end
  main = mod
  log("info", format("loaded from %s (socket %s, deadline %d ms)", lib, cfg.socket, cfg.deadline_ms))
end

do
  local ok, err = pcall(init)
  if not ok then log("error", "initialisation failed: " .. tostring(err) .. "; jobs pass unchanged") end
end

local function success()
  return type(slurm) == "table" and slurm.SUCCESS or 0
end

function slurm_job_submit(job_desc, part_list, submit_uid) -- luacheck: ignore 111
  if main then
    local ok, err = pcall(main.submit, job_desc, submit_uid, part_list)
    if not ok then log("error", "unexpected error, job passes unchanged: " .. tostring(err)) end
  end
  return success()
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) -- luacheck: ignore 111 212
  return success()
end

-- Tiny test harness and a stand-in for slurmctld's `slurm` table.
local T = {}
local tests, results = {}, {passed = 0, failed = 0}

function T.test(name, fn)
  tests[#tests + 1] = {name = name, fn = fn, file = T.current_file}
end

function T.record(file, name, ok, err)
  if ok then
    results.passed = results.passed + 1
  else
    results.failed = results.failed + 1
    print(string.format("FAIL %s: %s\n     %s", file:match("[^/]*$"), name, tostring(err)))
  end
end

function T.run_all(filter)
  for _, t in ipairs(tests) do
    if not filter or t.name:find(filter, 1, true) or t.file:find(filter, 1, true) then
      T.fake_slurm()
      local ok, err = xpcall(t.fn, debug.traceback)
      T.record(t.file, t.name, ok, err)
    end
  end
  return results.passed, results.failed
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

function T.eq(actual, expected, what)
  if actual ~= expected then
    error(string.format("%s: expected %s, got %s", what or "value", show(expected), show(actual)), 2)
  end
end

function T.ok(v, what)
  if not v then error((what or "expected a true value") .. " (got " .. show(v) .. ")", 2) end
  return v
end

function T.same(a, b, what)
  -- shallow table comparison
  for k, v in pairs(a) do
    if b[k] ~= v then error(string.format("%s: key %s: %s ~= %s", what or "table", show(k), show(v), show(b[k])), 2) end
  end
  for k, v in pairs(b) do
    if a[k] == nil then
      error(string.format("%s: missing key %s (expected %s)", what or "table", show(k), show(v)), 2)
    end
  end
end

function T.copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- A fresh global `slurm` like slurmctld 22.05's: log_* format their arguments with string.format.
function T.fake_slurm()
  local logs = {info = {}, error = {}, debug = {}, user = {}}
  local function logger(kind)
    return function(fmt, ...)
      local list = logs[kind]
      list[#list + 1] = string.format(fmt, ...)
    end
  end
  slurm = {
    SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, INFINITE = 4294967295,
    NO_VAL16 = 65534, INFINITE16 = 65535,
    log_info = logger("info"), log_error = logger("error"), log_debug = logger("debug"),
    log_user = logger("user"),
  }
  T.logs = logs
  return logs
end

function T.logged(kind, pattern)
  for _, line in ipairs(T.logs[kind]) do
    if line:find(pattern, 1, true) then return line end
  end
  return nil
end

-- Temporary directory (removed by the caller with T.rmdir).
function T.tmpdir()
  local p = io.popen("mktemp -d")
  local d = p:read("*l")
  p:close()
  return d
end

function T.rmdir(d)
  if d and d:match("^/tmp/") then os.execute('rm -rf "' .. d .. '"') end
end

function T.write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- A job_desc as slurmctld fills it for `sbatch -t 120 --mem=4000 -c 4 job.sh` (user alice); `over`
-- replaces fields (T.NIL: none).
function T.job_desc(over)
  local jd = {
    user_name = "alice", user_id = 1000, group_id = 1000, name = "train", work_dir = "/home/alice",
    partition = "batch", account = "physics", qos = nil,
    time_limit = 120, time_min = 4294967294,
    min_mem_per_node = 4000, min_mem_per_cpu = nil,
    min_cpus = 4, cpus_per_task = 4, num_tasks = 1, min_nodes = 1,
    tres_per_node = nil, array_inx = nil, admin_comment = nil, comment = nil,
    script = "#!/bin/bash\n#SBATCH -t 120\n#SBATCH --mem=4000\nsrun ./train\n",
  }
  for k, v in pairs(over or {}) do
    if v == T.NIL then jd[k] = nil else jd[k] = v end
  end
  -- sbatch, salloc and srun send -c as the least CPUs per node too (pn_min_cpus; --mincpus, when
  -- higher, wins), and NO_VAL16 without either (src/sbatch/opt.c, _opt_verify)
  if (over or {}).pn_min_cpus == nil then
    local cpt = jd.cpus_per_task
    jd.pn_min_cpus = type(cpt) == "number" and cpt >= 1 and cpt < 65534 and cpt or 65534
  end
  return jd
end
T.NIL = {}

-- A part_list as slurmctld 22.05 passes it: keyed by partition name, each record an empty table whose
-- __index answers `name`, `flag_default` (the number 1 for `default`, else 0), `max_time` (minutes
-- from `max_times` by name, else INFINITE, as a partition without MaxTime) and `default_time` (from
-- `default_times`, else NO_VAL, as a partition without DefaultTime). by_index: a list instead.
function T.part_list(names, default, by_index, max_times, default_times)
  local list = {}
  for i, name in ipairs(names) do
    local fields = {name = name, flag_default = name == default and 1 or 0,
      max_time = (max_times or {})[name] or 4294967295, default_time = (default_times or {})[name] or 4294967294}
    list[by_index and i or name] = setmetatable({}, {__index = function(_, k) return fields[k] end})
  end
  return list
end

-- Load an entry script (job_submit.lua, cli_filter.lua) the way Slurm does (a file chunk), into its own
-- global table.
function T.load_entry(path)
  local chunk = assert(loadfile(path))
  local env = setmetatable({}, {__index = _G})
  setfenv(chunk, env)
  chunk()
  return env
end

-- Each load gets fresh harp modules and package.path, as after a slurmctld reload or in a new sbatch.
function T.fresh(fn)
  local saved_loaded, saved_path = {}, package.path
  for k, v in pairs(package.loaded) do
    if k:sub(1, 5) == "harp." then saved_loaded[k] = v; package.loaded[k] = nil end
  end
  -- like slurmctld's Lua state: the plugin's directory is not on package.path until the entry adds it
  local parts = {}
  for entry in saved_path:gmatch("[^;]+") do
    if not entry:find("/plugin/?.lua", 1, true) then parts[#parts + 1] = entry end
  end
  package.path = table.concat(parts, ";")
  local ok, err = pcall(fn)
  for k in pairs(package.loaded) do
    if k:sub(1, 5) == "harp." then package.loaded[k] = nil end
  end
  for k, v in pairs(saved_loaded) do package.loaded[k] = v end
  package.path = saved_path
  if not ok then error(err, 0) end
end

-- transport stand-in: answers with `reply` (bytes), or fails with `fail`, or raises `raise`
function T.fake_transport(reply)
  local f = {calls = 0, requests = {}}
  function f.call(socket, method, payload, timeout_s, max_response)
    f.calls = f.calls + 1
    f.last = {socket = socket, method = method, payload = payload, timeout_s = timeout_s,
      max_response = max_response}
    if f.raise then error(f.raise) end
    if f.fail then return nil, f.fail end
    return f.reply
  end
  f.reply = reply
  return f
end

return T

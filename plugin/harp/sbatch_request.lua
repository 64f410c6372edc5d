-- sbatch's options (cli_filter/lua's `options` in slurm_cli_pre_submit, Slurm 22.05) -> SubmitRequest
-- table for pb.encode_request, read as `harp advise --script` reads #SBATCH lines
-- (daemon/slurm_harp/advice/script.py). pre_submit sees the options from the script, the environment
-- and the command line together, as strings that Slurm formats itself; an option never given reads as
-- its reset value (time "2982616-04:14:00", i.e. NO_VAL minutes; nodes "1-0"; cpus-per-task "0";
-- ntasks "1"), and those mean "not given" here, as in `harp advise --script` (no -n, no -c: no CPU
-- count is sent, and the line compares with Slurm's default of one CPU). Integer options never given
-- read as "-2" (NO_VAL printed as an int: ntasks-per-node, sockets-per-node, ntasks-per-gpu, ...).

local request = require "harp.request"
local signature = require "harp.script_signature"
local gpus_of = require "harp.gpus"

local tonumber, type, pcall, require, ceil = tonumber, type, pcall, require, math.ceil
local match, gmatch, lower = string.match, string.gmatch, string.lower
local io_open = io.open

local M = {}

local NO_VAL, NO_VAL16 = 4294967294, 65534
local MB_PER = {[""] = 1, M = 1, G = 1024, T = 1048576, P = 1073741824}
-- The options of each node's layout (-B S:C:T sets the same fields), each a factor of -N's tasks.
local LAYOUT = {"sockets-per-node", "cores-per-socket", "threads-per-core"}

local function index(t, k) return t[k] end

-- options[name] as a non-empty string, or nil (the C accessor may raise: pcall).
local function option(options, name)
  local ok, v = pcall(index, options, name)
  if ok and type(v) == "string" and v ~= "" then return v end
  return nil
end
M.option = option

-- Slurm's time formats: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S"; seconds round up to a minute.
-- "UNLIMITED"/"INFINITE", a reset value (>= NO_VAL minutes) or anything else: nil.
function M.minutes(text)
  if type(text) ~= "string" or #text > 32 then return nil end
  local days, rest = match(text, "^(%d+)%-([%d:]+)$")
  local parts = {}
  for p in gmatch(rest or text, "[^:]+") do parts[#parts + 1] = tonumber(match(p, "^%d+$")) end
  if #parts == 0 or #parts > 3 or not match(rest or text, "^%d+[%d:]*$") then return nil end
  for i = 1, #parts do if parts[i] == nil then return nil end end
  local d, h, m, s = tonumber(days) or 0, 0
  if days then
    h, m, s = parts[1], parts[2] or 0, parts[3] or 0
  elseif #parts == 3 then
    h, m, s = parts[1], parts[2], parts[3]
  else
    m, s = parts[1], parts[2] or 0
  end
  local total = ((d * 24 + h) * 60 + m) + ceil(s / 60)
  if total >= NO_VAL then return nil end
  return total
end

-- "500", "2G", "1T" (Slurm writes MB without a unit) in MB. 0 is --mem=0 (all of a node's memory, which
-- Slurm gives and bills), shown "0?" by sbatch (mbytes_to_str(0)): sent as 0, as `harp advise --script`
-- sends it. nil: not given, or text that is no amount.
function M.megabytes(text)
  if type(text) ~= "string" or #text > 20 then return nil end
  if text == "0?" or text == "0" then return 0 end
  local n, unit = match(text, "^(%d+)([MGTP]?)$")
  n = tonumber(n)
  if not n or n < 1 then return nil end
  return request.count64(n * MB_PER[unit], 1)
end

-- A whole number >= 1 (the lower bound of "2-4"), or nil.
local function whole(text)
  local n = tonumber(text and match(text, "^(%d+)"))
  return request.count32(n, 1)
end

-- The node range sbatch sends: "2" is 2 and 2, "2-4" 2 and 4; nil, nil when -N was not given ("1-0",
-- the reset value; any "N-0": sbatch sends no max_nodes then either).
local function node_range(text)
  if not text or match(text, "%-0$") then return nil, nil end
  local least = whole(text)
  return least, least and whole(match(text, "^%d+%-(.*)$") or text)
end

-- "gres:gpu:" before each item of a --gpus* value, as sbatch builds tres_per_* (xfmt_tres); nil for none.
local function tres(text)
  if not text then return nil end
  local out, sep = "", ""
  for item in gmatch(text, "[^,]+") do out, sep = out .. sep .. "gres:gpu:" .. item, "," end
  return out ~= "" and out or nil
end

-- -N's tasks where no -n: a task a node, times each of LAYOUT given where the node count is no range
-- (sbatch's _opt_verify; -B sets the same three fields), and whether LAYOUT gave any (sbatch then sends
-- them as num_tasks). -B without -N is not told from these options alone: not counted.
local function layout_tasks(get, nodes, max_nodes)
  local tasks, given = nodes, false
  if max_nodes == nil or max_nodes == nodes then
    for i = 1, #LAYOUT do
      local factor = whole(get(LAYOUT[i]))
      if factor then tasks, given = tasks * factor, true end
    end
  end
  return request.count32(tasks, 1), given
end

-- The job_desc fields harp.gpus reads, as sbatch 22.05 fills them from these options after checking
-- them (_opt_verify, then slurm_opt_create_job_desc): a getter for gpus.of_job, so that the hook counts
-- GPUs by the one rule the job_submit plugin and training count them by (harp/gpus.lua). Each option is
-- read when gpus.of_job asks for its field (a job without a GPU option reads only those).
-- num_tasks: -n ("1" is no -n: sbatch shows both alike), else --ntasks-per-node x nodes, else (-N
-- given) nodes x the layout asked, where the node count is not a range (sbatch's _opt_verify).
local function job_fields(get, nodes, max_nodes, cpt)
  local function count(name) return whole(get(name)) end
  local fields = {
    tres_per_job = function() return tres(get("gpus")) end,
    tres_per_node = function()
      local per_node, gres = tres(get("gpus-per-node")), get("gres")
      if gres and lower(gres) == "none" then gres = nil end
      if per_node and gres then return per_node .. "," .. gres end
      return per_node or gres
    end,
    tres_per_socket = function() return tres(get("gpus-per-socket")) end,
    tres_per_task = function() return tres(get("gpus-per-task")) end,
    ntasks_per_tres = function() return count("ntasks-per-tres") or count("ntasks-per-gpu") or NO_VAL16 end,
    min_nodes = function() return nodes or NO_VAL end,
    max_nodes = function() return max_nodes or NO_VAL end,
    ntasks_per_node = function() return count("ntasks-per-node") or NO_VAL16 end,
    ntasks_per_socket = function() return count("ntasks-per-socket") or NO_VAL16 end,
    sockets_per_node = function() return count("sockets-per-node") or NO_VAL16 end,
    cpus_per_task = function() return cpt or NO_VAL16 end,
    num_tasks = function()
      local tasks = count("ntasks")
      if tasks and tasks > 1 then return tasks end
      if max_nodes and max_nodes ~= nodes then return NO_VAL end
      local per_node = count("ntasks-per-node")
      if per_node then return request.count32((nodes or 1) * per_node, 1) or NO_VAL end
      if not nodes then return NO_VAL end
      local by_layout, given = layout_tasks(get, nodes, max_nodes)
      return given and by_layout or NO_VAL
    end,
  }
  return function(field)
    local read = fields[field]
    return read and read() or nil
  end
end
M.job_fields = job_fields

-- The name sbatch will give the job: -J, else "wrap" for --wrap, else the script's file name, else
-- "sbatch" (a script read from stdin): sbatch's own rule, applied after pre_submit.
function M.job_name(options, argv1)
  local name = option(options, "job-name")
  if name then return name end
  if option(options, "wrap") then return "wrap" end
  if type(argv1) == "string" and argv1 ~= "" then return match(argv1, "([^/]*)$") end
  return "sbatch"
end

-- lua-posix's stat and S_ISREG (harp.posix_stat), or nil.
local posix_stat = require "harp.posix_stat"
M.posix = posix_stat.stat and posix_stat or nil -- tests replace it

-- Whether `path` is a regular file. Only such a script is opened: open() of a FIFO (a script sbatch
-- already read from a pipe) or of a terminal waits, and sbatch with it. Without lua-posix, none is.
local function regular(path)
  local px = M.posix
  if not px then return false end
  local ok, st = pcall(px.stat, path)
  return ok and type(st) == "table" and px.S_ISREG(st.st_mode) ~= 0
end

-- The first MAX_SCAN bytes of the batch script, where the #SBATCH lines are; nil when unreadable.
local function script_head(path)
  if type(path) ~= "string" or path == "" or not regular(path) then return nil end
  local f = io_open(path, "rb")
  if not f then return nil end
  local ok, head = pcall(f.read, f, signature.MAX_SCAN + 1)
  f:close()
  if ok and type(head) == "string" then return head end
  return nil
end

local function first_arg(options)
  local ok, argv = pcall(index, options, "argv")
  if ok and type(argv) == "table" and type(argv[1]) == "string" then return argv[1] end
  return nil
end

-- The SubmitRequest of the job sbatch is about to send. Reads each option under pcall; an option that
-- cannot be read or parsed is left out. Its user fields stay empty: the daemon knows the caller.
function M.build(options)
  local get = function(name) return option(options, name) end
  local script = not get("wrap") and first_arg(options) or nil
  local nodes, max_nodes = node_range(get("nodes"))
  local tasks = whole(get("ntasks"))
  local per_node = whole(get("ntasks-per-node"))
  if per_node and (tasks == nil or tasks == 1) then
    tasks = per_node * (nodes or 1)
  elseif tasks == 1 then
    tasks = nil -- what sbatch shows when -n was not given
  end
  -- -N without -n: Slurm runs one task per node (a 2-node test cluster gave `-N 2` 2 CPUs, `-N 2 -c 2` 4),
  -- and one per socket, core and thread asked (layout_tasks).
  if tasks == nil and nodes then
    tasks = layout_tasks(get, nodes, max_nodes)
    if tasks == 1 then tasks = nil end
  end
  local cpt = whole(get("cpus-per-task"))
  -- --gpus, --gpus-per-node, --gres, --gpus-per-socket, --gpus-per-task, --ntasks-per-gpu: as accounting
  -- counts them (harp/gpus.lua)
  local gpus = gpus_of.of_job(job_fields(get, nodes, max_nodes, cpt))
  local partition = get("partition")
  return {
    job_name = request.text(M.job_name(options, script)),
    partition = partition and request.text(match(partition, "^[^,]*")),
    account = request.text(get("account")),
    qos = request.text(get("qos")),
    work_dir = request.text(get("chdir")),
    script_signature = signature.of(script_head(script)),
    time_limit_minutes = M.minutes(get("time")),
    time_min_minutes = M.minutes(get("time-min")),
    mem_per_node_mb = M.megabytes(get("mem")),
    mem_per_cpu_mb = M.megabytes(get("mem-per-cpu")),
    min_cpus = (tasks or cpt) and request.count32((tasks or 1) * (cpt or 1), 1) or nil,
    cpus_per_task = cpt,
    num_tasks = tasks,
    min_nodes = nodes,
    gpus_per_node = gpus,
    is_array = get("array") ~= nil,
  }
end

-- Whether the job holds whole nodes: sbatch --exclusive (or =exclusive). cli_filter shows the one field
-- --exclusive and --oversubscribe set (slurm_opt.c arg_get_exclusive, 22.05) as "exclusive",
-- "oversubscribe", "user", "mcs" (nodes to one user's or MCS label's jobs, each as it asks) or "unset".
-- Sent beside the SubmitRequest (AdviceRequest.exclusive), as `harp advise --script` sends it.
function M.exclusive(options)
  local v = option(options, "exclusive")
  return v ~= nil and lower(v) == "exclusive"
end

-- Is this an sbatch submission (not srun, salloc or scrontab)?
function M.is_sbatch(options)
  return option(options, "type") == "sbatch"
end

-- sbatch -Q/--quiet: the user asked for no messages.
function M.quiet(options)
  local q = tonumber(option(options, "quiet"))
  return q ~= nil and q > 0
end

return M

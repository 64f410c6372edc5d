-- A job's GPUs per node as training reads them, from job_desc (job_submit) or sbatch's options (cli_filter).
--
-- Training reads sacct's ReqTRES gres/gpu and gives a job ceil(gres/gpu / ReqNodes) GPUs per node
-- (accounting/sacct.py). slurmctld 22.05 writes ReqTRES once, as gres_job_state_validate counts the
-- job at submission (src/common/gres.c; it is not counted again once the job runs): per GPU type (no
-- type is a type of its own) the largest of
--   --gpus             tres_per_job     N
--   --gpus-per-node    tres_per_node    N x nodes                (--gres=gpu:N too)
--   --gpus-per-socket  tres_per_socket  N x nodes x sockets per node, else N x ceil(tasks / tasks per
--                                       socket), else N
--   --gpus-per-task    tres_per_task    N x tasks, else N
-- summed over the types. nodes: min_nodes, 1 when not given (as slurmctld defaults it, and ReqNodes);
-- tasks: num_tasks, which sbatch fills for -N n without -n, and which slurmctld derives where -N pins
-- the node count (below). --ntasks-per-gpu without any GPU asks tasks / that many GPUs.
-- A count that is no count (past NO_VAL, a huge or infinite product) gives nil: no count is sent.
-- The cli_filter hook hands of_job sbatch's options as these fields (sbatch_request.job_fields);
-- `harp advise --script` counts by a port of this rule (daemon/slurm_harp/advice/script.py,
-- _gpus_per_node): a change to the rule is made in both.

local floor, ceil, max = math.floor, math.ceil, math.max
local type, tonumber, pairs = type, tonumber, pairs
local gmatch, match, sub = string.gmatch, string.match, string.sub

local M = {}

local NO_VAL16 = 65534
local NO_VAL = 4294967294
-- slurmctld refuses a longer tres_per_* (_test_strlen): no job that runs has more to read
M.MAX_TRES = 1024

-- A whole number in [least, limit) (limit: the field's sentinel), else nil.
local function whole(v, limit, least)
  v = tonumber(v)
  if v == nil or v ~= v or v < least or v >= limit or floor(v) ~= v then return nil end
  return v
end

-- Calls fn(type, count) for each gpu item of a TRES string. 22.05 writes "gres:gpu:2", newer releases
-- "gres/gpu:2"; typed ("gpu:a100:2"), "=" separators and a missing count (= 1) are accepted; the type
-- of an untyped item is "".
local function each_gpu(tres, fn)
  if type(tres) ~= "string" then return end
  for item in gmatch(sub(tres, 1, M.MAX_TRES), "[^,]+") do
    local spec = match(item, "^%s*gres[:/](.*)$") or match(item, "^%s*(gpu.*)$")
    local name, rest = match(spec or "", "^([^:=]+)(.*)$")
    if name == "gpu" then
      -- the count is the last ":"/"=" separated part when it is a number (else it is a type)
      local n, kind = 1, sub(rest, 2)
      local head, last = match(rest, "^(.-)[:=]([^:=]*)$")
      local c = last and match(last, "^(%d+)%s*$")
      if c then n, kind = tonumber(c), sub(head, 2) end
      fn(kind, n)
    end
  end
end

-- ceil(total / nodes) as training spreads a job's GPUs (no node count, or 0: one node); nil unless a count.
function M.per_node(total, nodes)
  if total == nil then return nil end
  local n = whole(nodes, NO_VAL, 1) or 1
  return whole(ceil(total / n), NO_VAL, 0)
end

-- The tasks slurmctld counts per-task and per-socket GPUs by: num_tasks, else, for --gpus-per-task or
-- --ntasks-per-gpu with the node count pinned (min_nodes = max_nodes), nodes x --ntasks-per-gpu, else
-- nodes x --ntasks-per-node, else nodes when no -c (gres_job_state_validate).
local function tasks_of(get, nodes, per_task, per_gpu)
  local given = get("num_tasks")
  local tasks = whole(given, NO_VAL, 1)
  if given ~= NO_VAL or not (per_task or per_gpu) or whole(get("max_nodes"), NO_VAL, 1) ~= nodes then
    return tasks
  end
  if per_gpu then return nodes * per_gpu end
  local per_node = whole(get("ntasks_per_node"), NO_VAL16, 1)
  if per_node then return nodes * per_node end
  if get("cpus_per_task") == NO_VAL16 then return nodes end
  return nil
end

-- GPUs per node of a job whose job_desc fields `get` reads (nil for a field not there or whose read
-- raised), as training will read them from sacct; nil for a job that asks none, or no count.
-- Five fields are read for every job (four TRES strings, --ntasks-per-gpu); the counts beside them
-- only for a job that has one of them (each read is a lookup in slurmctld's C, under its locks).
function M.of_job(get)
  local per_job, per_node, per_socket = get("tres_per_job"), get("tres_per_node"), get("tres_per_socket")
  local per_task = get("tres_per_task")
  local per_gpu = whole(get("ntasks_per_tres"), NO_VAL16, 1)
  if not (per_job or per_node or per_socket or per_task or per_gpu) then return nil end
  local nodes = whole(get("min_nodes"), NO_VAL, 1) or 1
  local tasks = tasks_of(get, nodes, type(per_task) == "string" and per_task ~= "", per_gpu)
  local by_type, seen = {}, false
  local function add(tres, times)
    each_gpu(tres, function(kind, n)
      if n > 0 then by_type[kind], seen = max(by_type[kind] or 0, n * times), true end -- Slurm skips 0
    end)
  end
  add(per_job, 1)
  add(per_node, nodes)
  if type(per_socket) == "string" then
    local sockets = whole(get("sockets_per_node"), NO_VAL16, 1)
    local per = whole(get("ntasks_per_socket"), NO_VAL16, 1)
    add(per_socket, sockets and nodes * sockets or (tasks and per) and ceil(tasks / per) or 1)
  end
  add(per_task, tasks or 1)
  if not seen and per_gpu and tasks then by_type[""], seen = floor(tasks / per_gpu), true end
  if not seen then return nil end
  local total = 0
  for _, n in pairs(by_type) do total = total + n end
  return M.per_node(total, nodes)
end

return M

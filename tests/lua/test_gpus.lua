local T = ...
local gpus = require "harp.gpus"
local request = require "harp.request"

local NO_VAL, NO_VAL16 = 4294967294, 65534

-- The GPUs per node of a job that asks them by `tres` in job_desc's `field` alone: no node, task or
-- socket count, so that each of the four fields counts the string as it reads (x 1).
local TRES_FIELDS = {"tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task"}
local function asked(field, tres)
  return gpus.of_job(function(k) if k == field then return tres end end)
end

T.test("TRES strings: the GPU items of each tres_per_* field are counted", function()
  for _, field in ipairs(TRES_FIELDS) do
    local function g(tres) return asked(field, tres) end
    T.eq(g("gres:gpu:2"), 2, field .. ": 22.05 form")
    T.eq(g("gres/gpu:2"), 2, field .. ": slash form")
    T.eq(g("gres/gpu:a100:2"), 2, field .. ": typed")
    T.eq(g("gres:gpu:a100:4"), 4, field .. ": typed colon")
    T.eq(g("gres/gpu"), 1, field .. ": no count")
    T.eq(g("gres/gpu:a100"), 1, field .. ": type, no count")
    T.eq(g("gres/gpu=3"), 3, field .. ": equals")
    T.eq(g("gpu:2"), 2, field .. ": bare")
    T.eq(g("gres/shard:2"), nil, field .. ": not a gpu")
    T.eq(g("gres/gpu_mem:2"), nil, field .. ": prefix only")
    T.eq(g("gres/gpu:a100:1,gres/gpu:v100:2"), 3, field .. ": several entries")
    T.eq(g("gres/mps:100,gres/gpu:1"), 1, field .. ": mixed list")
    T.eq(g(""), nil, field .. ": empty")
    T.eq(g(nil), nil, field .. ": nil")
    T.eq(g("gres/gpu:" .. string.rep("9", 400)), nil, field .. ": past NO_VAL")
  end
end)

T.test("gpus spread per node as training spreads them", function()
  T.eq(gpus.per_node(4, 2), 2, "even")
  T.eq(gpus.per_node(3, 2), 2, "rounded up")
  T.eq(gpus.per_node(4, nil), 4, "no node count: one node")
  T.eq(gpus.per_node(4, 0), 4, "0 nodes: one node")
  T.eq(gpus.per_node(4, NO_VAL), 4, "NO_VAL nodes: one node")
  T.eq(gpus.per_node(nil, 2), nil, "no gpus")
  T.eq(gpus.per_node(1 / 0, 2), nil, "infinite")
end)

-- job_desc as sbatch 22.05 sends it: --gpus in tres_per_job, --gpus-per-task in tres_per_task
-- (src/common/slurm_opt.c, xfmt_tres: "gres:gpu:" then the user's text, per comma-separated item)
local function sent(over)
  return request.build(T.job_desc(over), 1).gpus_per_node
end

T.test("--gpus and --gpus-per-task reach the request as GPUs per node", function()
  T.eq(sent {tres_per_job = "gres:gpu:4"}, 4, "--gpus=4, no -N: one node")
  T.eq(sent {tres_per_job = "gres:gpu:4", min_nodes = 2}, 2, "--gpus=4 -N 2")
  T.eq(sent {tres_per_job = "gres:gpu:3", min_nodes = 2}, 2, "--gpus=3 -N 2: rounded up, as training")
  T.eq(sent {tres_per_job = "gres:gpu:4", min_nodes = NO_VAL}, 4, "NO_VAL nodes: one")
  T.eq(sent {tres_per_job = "gres/gpu:4"}, 4, "newer releases' slash form")
  T.eq(sent {tres_per_task = "gres:gpu:2", num_tasks = 4}, 8, "--gpus-per-task=2 -n 4, one node")
  T.eq(sent {tres_per_task = "gres:gpu:2", num_tasks = 4, min_nodes = 2}, 4, "-n 4 -N 2")
  T.eq(sent {tres_per_task = "gres:gpu:2", num_tasks = NO_VAL, min_nodes = NO_VAL}, 2, "no -n: one task")
  -- sbatch -N 2 --gpus-per-task=1: sbatch itself sets num_tasks = 2; slurmctld derives it too
  T.eq(sent {tres_per_task = "gres:gpu:1", num_tasks = NO_VAL, min_nodes = 2, max_nodes = 2,
    cpus_per_task = NO_VAL16}, 1, "-N 2 without -n: a task a node")
  T.eq(sent {tres_per_task = "gres:gpu:1", num_tasks = NO_VAL, min_nodes = 2, max_nodes = 2,
    ntasks_per_node = 3, cpus_per_task = NO_VAL16}, 3, "--ntasks-per-node=3 -N 2")
  T.eq(sent {tres_per_task = "gres:gpu:1", num_tasks = NO_VAL, min_nodes = 2, max_nodes = 4,
    cpus_per_task = NO_VAL16}, 1, "-N 2-4: no task count derived, one task")
  T.eq(sent {tres_per_task = "gres:gpu:2", num_tasks = NO_VAL, min_nodes = 2, max_nodes = 2, cpus_per_task = 4},
    1, "-c without -n: no task count derived, one task (2 GPUs over 2 nodes)")
end)

T.test("several GPU asks: per GPU type the largest, the types added up", function()
  T.eq(sent {tres_per_job = "gres:gpu:4", tres_per_node = "gres:gpu:1", min_nodes = 2}, 2,
    "--gpus=4 wins over 1 a node")
  T.eq(sent {tres_per_job = "gres:gpu:2", tres_per_node = "gres:gpu:3", min_nodes = 2}, 3,
    "3 a node wins over --gpus=2")
  T.eq(sent {tres_per_job = "gres:gpu:a100:2,gres:gpu:v100:2"}, 4, "two types")
  T.eq(sent {tres_per_job = "gres:gpu:tesla:4"}, 4, "typed")
  T.eq(sent {tres_per_job = "gres:gpu:2", tres_per_task = "gres:gpu:1", num_tasks = 6}, 6, "6 tasks x 1 over --gpus=2")
  T.eq(sent {tres_per_node = "gres:gpu:2,gres:mps:100", min_nodes = 3}, 2, "--gpus-per-node with another gres")
  T.eq(sent {tres_per_job = "gres:gpu:0"}, nil, "a zero count is no GPU ask (Slurm skips it)")
  T.eq(sent {tres_per_node = "gres:mps:100"}, nil, "no GPU")
  T.eq(sent {}, nil, "no GPU ask at all")
end)

T.test("--gpus-per-socket and --ntasks-per-gpu as slurmctld counts them", function()
  T.eq(sent {tres_per_socket = "gres:gpu:1", sockets_per_node = 2, min_nodes = 2}, 2, "x sockets per node")
  T.eq(sent {tres_per_socket = "gres:gpu:1", sockets_per_node = NO_VAL16, num_tasks = 5, ntasks_per_socket = 2}, 3,
    "x ceil(tasks / tasks per socket)")
  T.eq(sent {tres_per_socket = "gres:gpu:2", sockets_per_node = NO_VAL16, ntasks_per_socket = NO_VAL16}, 2, "else N")
  T.eq(sent {ntasks_per_tres = 2, num_tasks = 8}, 4, "--ntasks-per-gpu=2 -n 8, no GPU asked: 4 GPUs")
  T.eq(sent {ntasks_per_tres = 2, num_tasks = 8, tres_per_job = "gres:gpu:1"}, 1, "a GPU ask wins")
  T.eq(sent {ntasks_per_tres = NO_VAL16, num_tasks = 8}, nil, "NO_VAL16: none")
end)

T.test("odd GPU counts fail open: no count sent, never an error", function()
  local huge = string.rep("9", 400)
  T.eq(sent {tres_per_job = "gres:gpu:" .. huge}, nil, "400 digits")
  T.eq(sent {tres_per_job = "gres:gpu:4294967294"}, nil, "NO_VAL GPUs")
  T.eq(sent {tres_per_task = "gres:gpu:100000", num_tasks = 4294967293}, nil, "a product past NO_VAL")
  T.eq(sent {tres_per_task = "gres:gpu:2", num_tasks = 1.5}, 2, "a task count that is no count: one task")
  T.eq(sent {tres_per_job = "gres:gpu:4", min_nodes = -3}, 4, "a node count that is no count: one node")
  T.eq(sent {tres_per_job = 42}, nil, "a number instead of text")
  T.eq(sent {tres_per_job = "gres:gpu:2," .. string.rep("x", 5000) .. ",gres:gpu:a100:7"}, 2,
    "past the 1024 bytes slurmctld takes: not read")
  local raising = setmetatable({}, {__index = function(_, k)
    if k == "tres_per_task" or k == "num_tasks" then error("boom") end
    return T.job_desc {tres_per_job = "gres:gpu:4", min_nodes = 2}[k]
  end})
  T.eq(request.build(raising, 1).gpus_per_node, 2, "a read that raises drops that field only")
end)

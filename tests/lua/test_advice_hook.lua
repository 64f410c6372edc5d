local T = ...
-- The cli_filter hook: sbatch options -> AdviceRequest, Advice -> one line, and the hook failing silent.
local sbatch_request = require "harp.sbatch_request"
local advice_line = require "harp.advice_line"
local hook = require "harp.advice_hook"
local pb = require "harp.pb"
local W = require "pbtest"

local NO_TIME = "2982616-04:14:00" -- how 22.05 shows a time never given (NO_VAL minutes)

-- What cli_filter/lua's options table returns in pre_submit for `sbatch job.sh` with nothing set
-- (read from a real sbatch 22.05 on this machine), overridden by `over`.
local function options(over)
  local o = {type = "sbatch", time = NO_TIME, ["time-min"] = NO_TIME, ntasks = "1", ["cpus-per-task"] = "0",
    nodes = "1-0", ["ntasks-per-node"] = "-2", chdir = "/home/alice", exclusive = "unset", argv = {}}
  for k, v in pairs(over or {}) do o[k] = v end
  return o
end

T.test("time strings: Slurm's formats, reset and unlimited values are absent", function()
  local m = sbatch_request.minutes
  T.eq(m("00:10:00"), 10, "h:m:s")
  T.eq(m("1-02:00:00"), 1560, "d-h:m:s")
  T.eq(m("90"), 90, "minutes")
  T.eq(m("0:30"), 1, "seconds round up")
  T.eq(m("2-3"), 3060, "d-h")
  T.eq(m("1-00:01"), 1441, "d-h:m")
  T.eq(m(NO_TIME), nil, "NO_VAL")
  T.eq(m("UNLIMITED"), nil, "unlimited")
  T.eq(m("1:2:3:4"), nil, "too many parts")
  T.eq(m("-5"), nil, "negative")
  T.eq(m(""), nil, "empty")
  T.eq(m(string.rep("9", 400)), nil, "huge")
end)

T.test("memory strings: MB, G/T suffixes; 0 (all of a node) is 0; unset and junk are absent", function()
  local mb = sbatch_request.megabytes
  T.eq(mb("500"), 500, "plain MB")
  T.eq(mb("2G"), 2048, "G")
  T.eq(mb("1T"), 1048576, "T")
  T.eq(mb("0?"), 0, "--mem=0, as sbatch shows it")
  T.eq(mb("0"), 0, "0")
  T.eq(mb("00?"), nil, "not what sbatch writes")
  T.eq(mb("12Q"), nil, "unknown unit")
  T.eq(mb(nil), nil, "unset")
end)

T.test("an sbatch with options becomes the request harp advise would send", function()
  local r = sbatch_request.build(options {["job-name"] = "relax", time = "00:10:00", ntasks = "2",
    ["cpus-per-task"] = "3", nodes = "1-2", mem = "2G", partition = "batch,debug", gres = "gres:gpu:2",
    array = "1-3", account = "physics"})
  T.eq(r.job_name, "relax", "name")
  T.eq(r.partition, "batch", "first partition")
  T.eq(r.account, "physics", "account")
  T.eq(r.time_limit_minutes, 10, "time")
  T.eq(r.time_min_minutes, nil, "no time-min")
  T.eq(r.mem_per_node_mb, 2048, "mem")
  T.eq(r.num_tasks, 2, "tasks")
  T.eq(r.cpus_per_task, 3, "cpus per task")
  T.eq(r.min_cpus, 6, "cpus")
  T.eq(r.min_nodes, 1, "least nodes")
  T.eq(r.gpus_per_node, 2, "gres gpus")
  T.eq(r.is_array, true, "array")
  T.eq(r.user_name, nil, "no user: the daemon knows the caller")
end)

T.test("options never given are left out", function()
  local r = sbatch_request.build(options())
  T.eq(r.time_limit_minutes, nil, "time")
  T.eq(r.min_nodes, nil, "nodes 1-0")
  T.eq(r.cpus_per_task, nil, "cpus-per-task 0")
  T.eq(r.min_cpus, nil, "no CPU count (sbatch shows ntasks 1 when -n was not given)")
  T.eq(r.num_tasks, nil, "no task count")
  T.eq(r.gpus_per_node, nil, "gpus")
  T.eq(r.mem_per_node_mb, nil, "mem")
  T.eq(r.is_array, false, "array")
  T.eq(r.job_name, "sbatch", "stdin script: sbatch's own default name")
end)

T.test("tasks per node, --gpus spread over nodes, --gpus-per-node with a type", function()
  local r = sbatch_request.build(options {["ntasks-per-node"] = "4", nodes = "2"})
  T.eq(r.num_tasks, 8, "tasks from per node")
  T.eq(r.min_cpus, 8, "cpus")
  T.eq(sbatch_request.build(options {gpus = "8", nodes = "3"}).gpus_per_node, 3, "ceil(8/3)")
  T.eq(sbatch_request.build(options {["gpus-per-node"] = "a100:4"}).gpus_per_node, 4, "typed")
end)

T.test("--gpus-per-task, --gpus-per-socket and --ntasks-per-gpu are counted as harp/gpus.lua counts them", function()
  -- integer options never given show as "-2" (NO_VAL as an int)
  local unset = {["sockets-per-node"] = "-2", ["ntasks-per-socket"] = "-2", ["ntasks-per-gpu"] = "-2",
    ["ntasks-per-tres"] = "-2"}
  local function gpus(over)
    local o = options(unset)
    for k, v in pairs(over) do o[k] = v end
    return sbatch_request.build(o).gpus_per_node
  end
  T.eq(gpus {ntasks = "4", ["gpus-per-task"] = "1"}, 4, "-n 4 --gpus-per-task=1")
  T.eq(gpus {ntasks = "2", ["gpus-per-task"] = "a100:2"}, 4, "typed")
  T.eq(gpus {["gpus-per-task"] = "1"}, 1, "no -n (ntasks shows 1): one task")
  T.eq(gpus {nodes = "2", ["gpus-per-task"] = "1"}, 1, "-N 2: a task a node, 2 GPUs over 2 nodes")
  T.eq(gpus {nodes = "2", ["ntasks-per-node"] = "2", ["gpus-per-task"] = "1"}, 2, "--ntasks-per-node=2 -N 2")
  T.eq(gpus {nodes = "2", ["cpus-per-task"] = "4", ["gpus-per-task"] = "2"}, 1, "-c without -n: one task")
  T.eq(gpus {nodes = "2-4", ["ntasks-per-node"] = "2", ["gpus-per-task"] = "1"}, 1, "a range: one task")
  T.eq(gpus {nodes = "1", ["sockets-per-node"] = "2", ["gpus-per-socket"] = "1"}, 2, "x sockets")
  T.eq(gpus {ntasks = "5", ["ntasks-per-socket"] = "2", ["gpus-per-socket"] = "1"}, 3, "x ceil(5 / 2)")
  T.eq(gpus {["gpus-per-socket"] = "2"}, 2, "--gpus-per-socket alone: x 1")
  T.eq(gpus {ntasks = "8", ["ntasks-per-gpu"] = "2"}, 4, "--ntasks-per-gpu=2 -n 8")
  T.eq(gpus {ntasks = "8", ["ntasks-per-tres"] = "4", ["ntasks-per-gpu"] = "2"}, 2, "ntasks-per-tres first")
  T.eq(gpus {nodes = "2", gpus = "4", ["gpus-per-node"] = "1"}, 2, "two asks: the largest")
  T.eq(gpus {gres = "none"}, nil, "--gres=none")
  T.eq(gpus {gres = "gres:gpu:0"}, nil, "a zero count is no GPU ask")
  -- the job_desc fields sbatch would send, as harp.gpus reads them
  local get = sbatch_request.job_fields(function(name)
    return ({["gpus-per-task"] = "a100:1,v100:2", gres = "gres:gpu:1", ["gpus-per-node"] = "2", ntasks = "1",
      ["ntasks-per-gpu"] = "-2"})[name]
  end, nil, nil, nil)
  T.eq(get("tres_per_task"), "gres:gpu:a100:1,gres:gpu:v100:2", "xfmt_tres")
  T.eq(get("tres_per_node"), "gres:gpu:2,gres:gpu:1", "--gpus-per-node then --gres")
  T.eq(get("num_tasks"), 4294967294, "no -n: NO_VAL")
  T.eq(get("cpus_per_task"), 65534, "no -c: NO_VAL16")
  T.eq(get("ntasks_per_tres"), 65534, "-2: NO_VAL16")
  T.eq(get("tres_per_job"), nil, "no --gpus")
  T.eq(get("no_such_field"), nil, "a field it does not know")
  -- a GPU option whose read raises is left out, the others still count
  local o = setmetatable({}, {__index = function(_, k)
    if k == "gpus-per-task" then error("boom") end
    return options {ntasks = "4", gpus = "2"}[k]
  end})
  T.eq(sbatch_request.build(o).gpus_per_node, 2, "raising --gpus-per-task: --gpus alone")
end)

T.test("job name defaults as sbatch's: wrap, then the script's file name", function()
  T.eq(sbatch_request.build(options {wrap = "sleep 1", argv = {}}).job_name, "wrap", "wrap")
  local dir = T.tmpdir()
  local path = dir .. "/relax.sbatch"
  T.write(path, "#!/bin/sh\n#SBATCH -n 2\nsleep 1\n")
  local r = sbatch_request.build(options {argv = {path}})
  T.rmdir(dir)
  T.eq(r.job_name, "relax.sbatch", "basename")
  T.eq(r.script_signature, require("harp.script_signature").of("#!/bin/sh\n#SBATCH -n 2\nsleep 1\n"),
    "signature of the script file")
end)

T.test("a hostile name is cut to valid UTF-8; an unreadable script has no signature", function()
  local name = string.rep("\255\254x", 40000)
  local r = sbatch_request.build(options {["job-name"] = name, argv = {"/nonexistent/job.sh"}})
  T.eq(r.job_name, string.rep("??x", 85), "bounded, valid: a ? for each bad byte, as the harvest reads them")
  T.eq(r.script_signature, nil, "no signature")
end)

T.test("only a regular file is read as the script: a FIFO would block sbatch", function()
  local dir = T.tmpdir()
  local fifo = dir .. "/job.sh"
  T.ok(os.execute("mkfifo '" .. fifo .. "'") == 0, "mkfifo")
  local r = sbatch_request.build(options {argv = {fifo}})
  T.eq(r.script_signature, nil, "a FIFO: no signature, and no wait for a writer")
  T.eq(r.job_name, "job.sh", "named all the same")
  r = sbatch_request.build(options {argv = {dir}})
  T.eq(r.script_signature, nil, "a directory")
  local path = dir .. "/relax.sbatch"
  T.write(path, "#SBATCH -n 2\n")
  local posix = sbatch_request.posix
  sbatch_request.posix = nil
  r = sbatch_request.build(options {argv = {path}})
  sbatch_request.posix = posix
  os.remove(path)
  os.remove(fifo)
  T.rmdir(dir)
  T.eq(r.script_signature, nil, "without lua-posix, no script is opened")
end)

T.test("an options table whose reads raise gives a request without those fields", function()
  local o = setmetatable({}, {__index = function(_, k)
    if k == "type" then return "sbatch" end
    error("boom " .. k)
  end})
  local r = sbatch_request.build(o)
  T.eq(r.job_name, "sbatch", "default name")
  T.eq(r.min_cpus, nil, "cpus")
  T.ok(#pb.encode_advice_request(r) > 0, "encodes")
end)

---------------------------------------------------------------- the line

local function opt(partition, size, minutes, cost, extra)
  local o = {partition = partition, size = size, cpus = size, nodes = 1, priced = true, p_unfinished = 0,
    expected_minutes = minutes, expected_cost = cost}
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function advice(options_list, over)
  local a = {unit = "CPU", currency = "EUR", evidence = "1 run at 1 CPU, 1 at 2 CPUs", options = options_list}
  for k, v in pairs(over or {}) do a[k] = v end
  return a
end

T.test("a cheaper size is named with its time and cost against what was asked", function()
  local a = advice {opt("batch", 1, 40, 0.667), opt("batch", 2, 12, 0.4), opt("batch", 4, 10, 0.667)}
  T.eq(advice_line.line(a, {min_cpus = 1, partition = "batch"}),
    "harp: 2 CPUs in batch would take ~12 min and cost ~0.4 EUR (you asked 1 CPU: ~40 min, ~0.67 EUR); "
    .. "harp advise for more", "line")
  T.eq(advice_line.line(a, {}), advice_line.line(a, {min_cpus = 1}), "no CPU count asked: one CPU")
end)

T.test("a faster size at no more cost is named when none is cheaper", function()
  local a = advice {opt("batch", 1, 40, 0.667), opt("batch", 2, 20, 0.667), opt("batch", 4, 10, 0.667)}
  local line = advice_line.line(a, {min_cpus = 1, partition = "batch"})
  T.ok(line and line:find("4 CPUs in batch would take ~10 min", 1, true), tostring(line))
end)

T.test("no line: nothing better by the margin, no evidence at the size asked, or nothing priced", function()
  local a = advice {opt("batch", 1, 40, 0.667), opt("batch", 2, 39, 0.64)}
  T.eq(advice_line.line(a, {min_cpus = 1, partition = "batch"}), nil, "within the margin")
  T.eq(advice_line.line(a, {min_cpus = 8, partition = "batch"}), nil, "asked size has no option")
  local unpriced = advice {opt("batch", 1, 40, 0.667), {partition = "batch", size = 2, priced = false,
    p_unfinished = 0, expected_minutes = 0, expected_cost = 0}}
  T.eq(advice_line.line(unpriced, {min_cpus = 1}), nil, "unpriced ignored")
  local slower = advice {opt("batch", 1, 40, 0.667), opt("batch", 2, 60, 2)}
  T.eq(advice_line.line(slower, {min_cpus = 1}), nil, "worse on both")
  T.eq(advice_line.line(advice {}, {min_cpus = 1}), nil, "no options: no evidence")
  T.eq(advice_line.line(nil, {min_cpus = 1}), nil, "no advice")
end)

T.test("at a cost of 0 nothing is cheaper: a slower free option is not named, a faster one is", function()
  -- billing.price = 0, or a free [[billing.partition]]: every cost, and 90 % of it, is 0.
  local free = advice {opt("free", 4, 20, 0), opt("free", 1, 75, 0), opt("scavenger", 4, 40, 0)}
  T.eq(advice_line.line(free, {min_cpus = 4, partition = "free"}), nil, "slower at the same cost of 0")
  local paid = advice {opt("free", 4, 20, 0), opt("batch", 4, 10, 3.2)}
  T.eq(advice_line.line(paid, {min_cpus = 4, partition = "free"}), nil, "faster but dearer")
  local faster = advice {opt("free", 1, 75, 0), opt("free", 4, 20, 0)}
  local line = advice_line.line(faster, {min_cpus = 1, partition = "free"})
  T.ok(line and line:find("^harp: 4 CPUs in free would take ~20 min and cost ~0 EUR %(you asked 1 CPU: ~75 min"),
    tostring(line))
end)

T.test("an option that may never finish is not advice", function()
  local a = advice {opt("batch", 1, 40, 0.667), opt("short", 2, 5, 0.1, {p_unfinished = 0.5})}
  T.eq(advice_line.line(a, {min_cpus = 1}), nil, "p_unfinished > 0")
end)

T.test("without -p the asked size's cheapest partition is the comparison", function()
  local a = advice {opt("debug", 1, 40, 0.3), opt("batch", 1, 40, 0.667), opt("batch", 2, 20, 0.5)}
  T.eq(advice_line.line(a, {min_cpus = 1}), nil, "0.5 is not cheaper than debug's 0.3")
  local line = advice_line.line(a, {min_cpus = 1, partition = "batch"})
  T.ok(line and line:find("in debug", 1, true), tostring(line))
end)

-- The options a real sbatch 22.05 shows pre_submit for `sbatch -N 4` (and `-N 4 -c 2`): nodes "4",
-- ntasks "1" as when -n was not given. Slurm runs one task per node then (a 2-node test cluster gave
-- `-N 2` 2 CPUs, `-N 2 -c 2` 4), so the job asks 4 CPUs (8): the line said "you asked 1 CPU".
T.test("-N without -n is one task per node, as Slurm runs it: the size the line compares", function()
  local a = advice {opt("batch", 1, 63, 1.05), opt("batch", 2, 30, 1.0), opt("batch", 4, 20, 1.33),
    opt("batch", 8, 16, 2.1)}
  local r = sbatch_request.build(options {nodes = "4"})
  T.eq(r.min_cpus, 4, "one task per node, as harp advise --script reads -N 4")
  T.eq(r.num_tasks, 4, "4 tasks")
  local line = advice_line.line(a, r)
  T.ok(line and line:find("(you asked 4 CPUs: ~20 min, ~1.3 EUR)", 1, true), tostring(line))
  line = advice_line.line(a, sbatch_request.build(options {nodes = "4", ["cpus-per-task"] = "2"}))
  T.ok(line and line:find("(you asked 8 CPUs: ~16 min, ~2.1 EUR)", 1, true), tostring(line))
  line = advice_line.line(a, sbatch_request.build(options {nodes = "2", ntasks = "4"}))
  T.ok(line and line:find("(you asked 4 CPUs", 1, true), "-n 4 on 2 nodes: " .. tostring(line))
  local dear2 = advice {opt("batch", 2, 30, 2.0), opt("batch", 4, 20, 1.33)}
  line = advice_line.line(dear2, sbatch_request.build(options {nodes = "2-4"}))
  T.ok(line and line:find("(you asked 2 CPUs", 1, true), "a range: its least: " .. tostring(line))
  line = advice_line.line(a, sbatch_request.build(options()))
  T.ok(line and line:find("(you asked 1 CPU", 1, true), "no -N: one CPU: " .. tostring(line))
end)

T.test("GPU jobs are sized in GPUs per node times nodes", function()
  local a = advice({opt("gpu", 4, 60, 8), opt("gpu", 2, 70, 4.7)}, {unit = "GPU", currency = "SU"})
  local line = advice_line.line(a, {gpus_per_node = 2, min_nodes = 2, min_cpus = 8})
  T.ok(line and line:find("^harp: 2 GPUs in gpu would take ~70 min and cost ~4.7 SU %(you asked 4 GPUs"), line)
end)

T.test("the daemon's text is shown without control characters", function()
  local a = advice({opt("batch", 1, 40, 0.667), opt("b\27[31mad\n", 2, 12, 0.4)}, {currency = "E\rUR"})
  local line = advice_line.line(a, {min_cpus = 1})
  T.ok(line and not line:find("%c"), tostring(line))
end)

T.test("durations and numbers read short", function()
  T.eq(advice_line.duration(0.1), "6 s", "seconds")
  T.eq(advice_line.duration(2.5), "2.5 min", "minutes")
  T.eq(advice_line.duration(150), "2.5 h", "hours")
  T.eq(advice_line.number(0.0055), "0.0055", "small")
  T.eq(advice_line.number(1234.4), "1234", "large")
end)

---------------------------------------------------------------- the hook

local ANSWER = W.advice {options = {{size = 1, expected_minutes = 40, expected_cost = 0.667},
  {size = 2, expected_minutes = 12, expected_cost = 0.4}}, cheapest = 1, notes = {"a note"}}

local fake = T.fake_transport

local function setup(reply, env)
  local out, tr = {}, fake(reply)
  hook.configure({socket = "/run/x/advice.sock", deadline_ms = 300}, {transport = tr,
    getenv = function(k) return (env or {})[k] end, write = function(s) out[#out + 1] = s end})
  return out, tr
end

T.test("the hook asks Advisor/Advise within the deadline and prints one line", function()
  local out, tr = setup(ANSWER)
  T.eq(hook.pre_submit(options {["job-name"] = "relax", partition = "batch"}, 0), "printed", "status")
  T.eq(#out, 1, "one line")
  T.ok(out[1]:find("^harp: 2 CPUs in batch"), out[1])
  T.eq(tr.last.method, "/harp.v1.Advisor/Advise", "method")
  T.eq(tr.last.socket, "/run/x/advice.sock", "socket")
  T.eq(tr.last.timeout_s, 0.3, "deadline")
  T.eq(tr.last.payload:sub(1, 1), "\10", "AdviceRequest.job (field 1, length-delimited)")
end)

T.test("sbatch --exclusive is sent beside the job; =user, =mcs, --oversubscribe and unset are not", function()
  -- cli_filter shows --exclusive and --oversubscribe as one field (slurm_opt.c arg_get_exclusive)
  local exclusive_field = "\48\1" -- AdviceRequest.exclusive (field 6, varint) = true
  local job_only = pb.encode_advice_request(sbatch_request.build(options {["job-name"] = "relax"}))
  for value, sent in pairs {exclusive = true, EXCLUSIVE = true, user = false, mcs = false,
    oversubscribe = false, unset = false} do
    local _, tr = setup(ANSWER)
    hook.pre_submit(options {["job-name"] = "relax", exclusive = value}, 0)
    T.eq(tr.last.payload, sent and job_only .. exclusive_field or job_only, value)
  end
  local raising = setmetatable({}, {__index = function(_, k)
    if k == "type" then return "sbatch" end
    if k == "exclusive" then error("boom") end
    return options()[k]
  end})
  T.eq(sbatch_request.exclusive(raising), false, "a read that raises: not sent")
  T.eq(pb.encode_advice_request({}, true), "\10\0" .. exclusive_field, "after the job, in field order")
end)

T.test("daemon down, garbage, an error raised: no line, and why only with HARP_ADVICE_DEBUG=1", function()
  local out, tr = setup(nil)
  tr.fail = "connect /run/x/advice.sock: No such file or directory"
  T.eq(hook.pre_submit(options(), 0), "unavailable", "down")
  T.eq(#out, 0, "silent")
  out = setup("\255\255\255", {HARP_ADVICE_DEBUG = "1"})
  T.eq(hook.pre_submit(options(), 0), "unavailable", "garbage")
  T.ok(out[1] and out[1]:find("^harp: no advice %(bad answer"), tostring(out[1]))
  out, tr = setup(ANSWER)
  tr.raise = "kaboom"
  T.eq(hook.pre_submit(options(), 0), "unavailable", "raised")
  T.eq(#out, 0, "silent")
end)

T.test("nothing better: no line", function()
  local out = setup(W.advice {options = {{size = 1, expected_minutes = 40, expected_cost = 0.667}}})
  T.eq(hook.pre_submit(options(), 0), "nothing", "status")
  T.eq(#out, 0, "silent")
end)

T.test("HARP_ADVICE=0 or off, -Q, srun/salloc and later het components: no call at all", function()
  for _, v in ipairs {"0", "off", "OFF", "no", "false"} do
    local out, tr = setup(ANSWER, {HARP_ADVICE = v})
    T.eq(hook.pre_submit(options(), 0), "silenced", v)
    T.eq(tr.calls + #out, 0, "no call, no line for " .. v)
  end
  local _, tr = setup(ANSWER)
  T.eq(hook.pre_submit(options {quiet = "1"}, 0), "silenced", "-Q")
  T.eq(hook.pre_submit(options {type = "srun"}, 0), "not_sbatch", "srun")
  T.eq(hook.pre_submit(options(), 1), "not_sbatch", "het component 1")
  T.eq(tr.calls, 0, "no call")
  local out2 = setup(ANSWER, {HARP_ADVICE = "1"})
  T.eq(hook.pre_submit(options(), 0), "printed", "HARP_ADVICE=1 is not silence")
  T.eq(#out2, 1, "line")
end)

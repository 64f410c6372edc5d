local T = ...
local request = require "harp.request"

local NO_VAL, INFINITE, NO_VAL16 = 4294967294, 4294967295, 65534
local NO_VAL64 = 18446744073709551614 -- as a double: 2^64

-- The typical job_desc, except that reading ``field`` raises (as a broken userdata field may).
local function raising_at(field)
  return setmetatable({}, {__index = function(_, k)
    if k == field then error("boom") end
    return T.job_desc()[k]
  end})
end

T.test("typical job maps to request fields", function()
  local r = request.build(T.job_desc(), 1000)
  T.eq(r.user_name, "alice", "user_name")
  T.eq(r.user_id, 1000, "user_id")
  T.eq(r.account, "physics", "account")
  T.eq(r.partition, "batch", "partition")
  T.eq(r.qos, "normal", "qos: none named, no default: slurmctld's own")
  T.eq(r.job_name, "train", "job_name")
  T.eq(r.work_dir, "/home/alice", "work_dir")
  T.eq(r.time_limit_minutes, 120, "time limit")
  T.eq(r.time_min_minutes, nil, "time_min NO_VAL")
  T.eq(r.mem_per_node_mb, 4000, "mem per node")
  T.eq(r.mem_per_cpu_mb, nil, "mem per cpu")
  T.eq(r.min_cpus, 4, "min_cpus")
  T.eq(r.cpus_per_task, 4, "cpus_per_task")
  T.eq(r.num_tasks, 1, "num_tasks")
  T.eq(r.min_nodes, 1, "min_nodes")
  T.eq(r.is_array, false, "is_array")
  T.ok(math.abs(r.submit_time - os.time()) <= 2, "submit_time is now")
  T.eq(r.script_signature, nil, "no signature: sacct records no script, so no model has it")
end)

T.test("the script is not read", function()
  -- job_desc.script copies the whole script into Lua under slurmctld's locks, and hashing its
  -- #SBATCH lines cost more than the rest of the request: for a value no model has.
  local jd, read = T.job_desc {}, false
  jd.script = nil
  setmetatable(jd, {__index = function(_, k) if k == "script" then read = true end end})
  request.build(jd, 1000)
  T.eq(read, false, "job_desc.script untouched")
end)

T.test("sentinels and nil mean absent", function()
  local r = request.build(T.job_desc {
    time_limit = NO_VAL, time_min = INFINITE, cpus_per_task = NO_VAL16, num_tasks = NO_VAL,
    min_nodes = NO_VAL, min_cpus = NO_VAL, min_mem_per_node = NO_VAL64, user_id = NO_VAL,
    account = T.NIL, partition = "", name = T.NIL, script = T.NIL,
  }, NO_VAL)
  for _, k in ipairs {"time_limit_minutes", "time_min_minutes", "cpus_per_task", "num_tasks", "min_nodes",
      "min_cpus", "mem_per_node_mb", "user_id", "account", "partition", "job_name", "script_signature"} do
    T.eq(r[k], nil, k)
  end
  r = request.build(T.job_desc {time_limit = INFINITE, cpus_per_task = 65535}, 7)
  T.eq(r.time_limit_minutes, nil, "INFINITE time")
  T.eq(r.cpus_per_task, nil, "INFINITE16")
end)

T.test("user_id falls back to submit_uid", function()
  local r = request.build(T.job_desc {user_id = T.NIL}, 1234)
  T.eq(r.user_id, 1234, "user_id")
end)

T.test("non-integral, negative and non-number values are absent", function()
  local r = request.build(T.job_desc {time_limit = 1.5, min_cpus = -1, num_tasks = "x", min_nodes = 0 / 0}, 1)
  T.eq(r.time_limit_minutes, nil, "1.5")
  T.eq(r.min_cpus, nil, "-1")
  T.eq(r.num_tasks, nil, "string")
  T.eq(r.min_nodes, nil, "nan")
end)

T.test("memory flavours", function()
  local r = request.build(T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 2048}, 1)
  T.eq(r.mem_per_node_mb, nil, "per node absent")
  T.eq(r.mem_per_cpu_mb, 2048, "per cpu")
  r = request.build(T.job_desc {min_mem_per_node = T.NIL}, 1)
  T.eq(r.mem_per_node_mb, nil, "no memory given")
  T.eq(r.mem_per_cpu_mb, nil, "no memory given")
  r = request.build(T.job_desc {min_mem_per_node = 0}, 1)
  T.eq(r.mem_per_node_mb, 0, "--mem=0 (a whole node) sent as 0: the daemon reads the node's memory")
  r = request.build(T.job_desc {min_mem_per_cpu = 0}, 1)
  T.eq(r.mem_per_cpu_mb, 0, "--mem-per-cpu=0 (a whole node) sent as 0")
  -- per-cpu with the MEM_PER_CPU flag still set (2^63 + 100) is out of range
  r = request.build(T.job_desc {min_mem_per_node = T.NIL, min_mem_per_cpu = 9223372036854775808 + 100}, 1)
  T.eq(r.mem_per_cpu_mb, nil, "flag bit")
end)

T.test("gpus per node via build; tres_per_node sent as given", function()
  local r = request.build(T.job_desc {tres_per_node = "gres:gpu:a100:2"}, 1)
  T.eq(r.gpus_per_node, 2, "via build")
  T.eq(r.tres_per_node, "gres:gpu:a100:2", "raw string kept")
end)

T.test("huge strings are truncated", function()
  -- What slurmdbd keeps of a name, an account or a partition (TINYTEXT): the name it is harvested as.
  T.eq(request.MAX_STRING, 255, "the cap")
  T.eq(request.build(T.job_desc {name = string.rep("a", 300)}, 1).job_name, string.rep("a", 255), "300 bytes")
  local big = string.rep("x", 100000)
  local r = request.build(T.job_desc {name = big, work_dir = big, account = big, tres_per_node = big}, 1)
  T.eq(#r.job_name, request.MAX_STRING, "name")
  T.eq(#r.work_dir, request.MAX_STRING, "work_dir")
  T.eq(#r.account, request.MAX_STRING, "account")
  T.eq(#r.tres_per_node, request.MAX_STRING, "tres")
end)

T.test("is_array from array_inx", function()
  T.eq(request.build(T.job_desc {array_inx = "0-9%2"}, 1).is_array, true, "array")
  T.eq(request.build(T.job_desc {array_inx = ""}, 1).is_array, false, "empty")
end)

-- Each expected text is what Python's bytes.decode("utf-8", "surrogateescape") makes of the bytes, each
-- escaped byte as "?", cut after the last whole character within `max` bytes: the harvest reads sacct's
-- output so (tests/unit/test_lua_text.py checks the two sides against each other).
local UTF8_CASES = {
  {"héllo", 100, "héllo", "valid kept"},
  {"h\233llo", 100, "h?llo", "a Latin-1 byte"},
  {"\128abc\255", 100, "?abc?", "lone continuation and 0xFF"},
  {"a\128\191b", 100, "a??b", "two lone continuation bytes"},
  {"\192\128", 100, "??", "overlong NUL"},
  {"\192\175", 100, "??", "overlong slash"},
  {"\224\128\175", 100, "???", "overlong three bytes"},
  {"\237\160\128", 100, "???", "a surrogate"},
  {"\244\144\128\128", 100, "????", "past U+10FFFF"},
  {"price\226\130", 100, "price??", "a truncated character at the end"},
  {"\240\159\152x", 100, "???x", "a truncated emoji"},
  {"h\195\169\255\226\130\172\226\130\237\159\191\240\144\128\128z", 100,
    "h\195\169?\226\130\172??\237\159\191\240\144\128\128z", "mixed valid and invalid"},
  {"\240\159\152\128", 100, "\240\159\152\128", "an emoji kept"},
  {"ab\195\169", 3, "ab", "a two-byte character past the cut: left out, not replaced"},
  {"ab\226\130\172", 4, "ab", "a three-byte character past the cut"},
  {"ab\255", 3, "ab?", "a bad byte within the cut"},
  {"ab\226\130x", 3, "ab?", "a truncated character at the cut: its first byte"},
  {"plain", 100, "plain", "ASCII kept"},
  {"abcdef", 3, "abc", "ASCII cut"},
  {"ab\0cd", 10, "ab\0cd", "NUL is ASCII"},
  {"", 10, "", "empty"},
}

T.test("text fields are valid UTF-8, cut on a character boundary", function()
  local utf8 = request.utf8
  for _, case in ipairs(UTF8_CASES) do T.eq(utf8(case[1], case[2]), case[3], case[4]) end
  T.eq(utf8(string.rep("a", 300) .. "\255", 256), string.rep("a", 256), "bytes past the cut not looked at")
  T.eq(utf8(string.rep("é", 200) .. "\255", 256), string.rep("é", 128), "cut on a character boundary")
  local name = string.rep("é", 200) -- 400 bytes: cut to 255 on a boundary (254), no '?'
  local r = request.build(T.job_desc {name = name, work_dir = "/home/\255\254x"}, 1000)
  T.eq(r.job_name, string.rep("é", 127), "cut to whole characters")
  T.eq(r.work_dir, "/home/??x", "invalid bytes replaced")
end)

T.test("a field that raises on access is dropped, the rest kept", function()
  local r = request.build(raising_at("time_limit"), 1)
  T.eq(r.time_limit_minutes, nil, "dropped")
  T.eq(r.min_cpus, 4, "kept")
end)

-- Jobs without -A or --qos: slurmctld gives them the user's default account and its default QOS, and
-- job_desc answers those as default_account and default_qos.
T.test("no account or QOS given: the defaults job_desc answers are sent", function()
  local jd = T.job_desc {account = T.NIL, default_account = "research", default_qos = "normal"}
  local r = request.build(jd, 1000)
  T.eq(r.account, "research", "default account")
  T.eq(r.qos, "normal", "default QOS")
  T.eq(jd.account, nil, "job_desc not modified")
  r = request.build(T.job_desc {account = "", qos = "", default_account = "research", default_qos = "low"}, 1)
  T.eq(r.account, "research", "empty account")
  T.eq(r.qos, "low", "empty QOS")
end)

T.test("a given account or QOS wins over the defaults; no default account is no field", function()
  local r = request.build(T.job_desc {qos = "high", default_account = "research", default_qos = "normal"}, 1)
  T.eq(r.account, "physics", "given account")
  T.eq(r.qos, "high", "given QOS")
  r = request.build(T.job_desc {account = T.NIL}, 1)
  T.eq(r.account, nil, "no default account (no association)")
  -- An association without a default QOS (job_desc.default_qos is nil): slurmctld gives the job
  -- "normal", and accounting records it (tests/e2e/test_plugin.py)
  T.eq(r.qos, "normal", "no default QOS: slurmctld's own")
  -- Each default is a lookup in slurmctld's association manager: only made when needed.
  local reads = {}
  local jd = setmetatable({}, {__index = function(_, k) reads[k] = true; return T.job_desc()[k] end})
  request.build(jd, 1)
  T.eq(reads.default_account, nil, "no default account read when an account is given")
  T.eq(reads.default_qos, true, "the default QOS read when no QOS is given")
end)

-- Jobs without -p: Slurm runs (and accounting records) them in the default partition.
local PARTS = {"debug", "batch", "gpu"}

T.test("no partition given: the default partition from part_list is sent", function()
  local jd = T.job_desc {partition = T.NIL}
  T.eq(request.build(jd, 1, T.part_list(PARTS, "batch")).partition, "batch", "nil partition")
  T.same(jd, T.job_desc {partition = T.NIL}, "job_desc not modified")
  T.eq(jd.partition, nil, "still no partition in job_desc")
  jd = T.job_desc {partition = ""}
  T.eq(request.build(jd, 1, T.part_list(PARTS, "gpu")).partition, "gpu", "empty partition")
  T.eq(jd.partition, "", "job_desc not modified")
end)

T.test("an explicit partition is kept", function()
  local r = request.build(T.job_desc {partition = "debug"}, 1, T.part_list(PARTS, "batch"))
  T.eq(r.partition, "debug", "explicit")
  r = request.build(T.job_desc {partition = "debug,gpu"}, 1, T.part_list(PARTS, "batch"))
  T.eq(r.partition, "debug,gpu", "a list is sent as given")
end)

T.test("part_list keyed by name or by index", function()
  local jd = T.job_desc {partition = T.NIL}
  T.eq(request.build(jd, 1, T.part_list(PARTS, "gpu")).partition, "gpu", "by name (22.05)")
  T.eq(request.build(jd, 1, T.part_list(PARTS, "gpu", true)).partition, "gpu", "by index")
  -- the record's name wins over the key; a string key stands in for a missing name
  local d = request.default_partition
  T.eq(d {alias = {name = "real", flag_default = 1}}, "real", "name field first")
  T.eq(d {batch = {flag_default = 1}}, "batch", "key when the record has no name")
  T.eq(d {{flag_default = 1}}, nil, "index key and no name")
  T.eq(d {batch = {name = "", flag_default = 1}}, "batch", "empty name")
  T.eq(d {a = {name = "a", flag_default = true}}, "a", "true counts as default")
  T.eq(#d {a = {name = string.rep("p", 1000), flag_default = 1}}, request.MAX_STRING, "long name cut")
end)

T.test("no partition flagged default: no partition", function()
  local jd = T.job_desc {partition = T.NIL}
  T.eq(request.build(jd, 1, T.part_list(PARTS, nil)).partition, nil, "none flagged")
  T.eq(request.build(jd, 1, {}).partition, nil, "empty part_list")
  local d = request.default_partition
  T.eq(d {a = {name = "a", flag_default = 0}}, nil, "flag_default 0 is not default")
  T.eq(d {a = {name = "a", flag_default = "1"}}, nil, "only the number 1 or true")
  T.eq(d {a = {name = "a", flag_default = 0}, b = {name = "b", flag_default = 1}}, "b", "the flagged one")
end)

T.test("a part_list that raises, nil or is no table: no partition, no error", function()
  local function raising() return setmetatable({}, {__index = function(_, k) error("no field " .. k) end}) end
  local jd = T.job_desc {partition = T.NIL}
  for what, parts in pairs {
    ["records raise"] = {batch = raising(), debug = raising()},
    ["records are numbers"] = {1, 2},
    ["records are booleans"] = {batch = true},
    ["a string"] = "batch",
    ["a number"] = 7,
    ["a function"] = function() return "batch" end,
    ["a userdata"] = newproxy(true),
  } do
    local ok, r = pcall(request.build, jd, 1, parts)
    T.ok(ok, what .. ": " .. tostring(r))
    T.eq(r.partition, nil, what)
    T.eq(r.user_name, "alice", what .. ": the rest is kept")
  end
  T.eq(request.build(jd, 1, nil).partition, nil, "nil part_list")
  T.eq(request.build(jd, 1).partition, nil, "no part_list (two-argument call)")
  -- only the raising record is skipped
  local parts = T.part_list(PARTS, "batch")
  parts.broken = raising()
  T.eq(request.build(jd, 1, parts).partition, "batch", "a raising record does not hide the default")
  -- name raises but flag_default is 1: the key stands in
  parts = {batch = setmetatable({}, {__index = function(_, k)
    if k == "name" then error("boom") end
    return 1
  end})}
  T.eq(request.default_partition(parts), "batch", "key when name raises")
end)

T.test("a partition field that raises is not taken for none given", function()
  local r = request.build(raising_at("partition"), 1, T.part_list(PARTS, "batch"))
  T.eq(r.partition, nil, "unknown: not the default")
  T.eq(r.user_name, "alice", "the rest is kept")
end)

-- Without --time slurmctld gives the job its partition's DefaultTime (else MaxTime) after job_submit.lua,
-- and accounting records that limit: the request carries it in a field of its own, for the features.
T.test("no time limit given: the partition's default limit is sent beside it", function()
  -- debug: DefaultTime 30, MaxTime 60; gpu: MaxTime 120 only; batch (default): no limit at all
  local parts = T.part_list(PARTS, "batch", false, {debug = 60, gpu = 120}, {debug = 30})
  local function sent(over) return request.build(T.job_desc(over), 1, parts) end
  local r = sent {time_limit = NO_VAL, partition = "debug"}
  T.eq(r.time_limit_minutes, nil, "the user asked for no limit")
  T.eq(r.default_time_limit_minutes, 30, "DefaultTime")
  T.eq(sent({time_limit = T.NIL, partition = "debug"}).default_time_limit_minutes, 30, "nil time_limit")
  T.eq(sent({time_limit = NO_VAL, partition = "gpu"}).default_time_limit_minutes, 120, "no DefaultTime: MaxTime")
  T.eq(sent({time_limit = NO_VAL, partition = "batch"}).default_time_limit_minutes, nil, "INFINITE: none")
  T.eq(sent({time_limit = NO_VAL, partition = "debug,gpu"}).default_time_limit_minutes, 30, "a list: smallest")
  T.eq(sent({time_limit = NO_VAL, partition = "gpu,nope"}).default_time_limit_minutes, 120, "the ones known")
  -- no -p: the default partition's
  local flagged = T.part_list(PARTS, "gpu", true, {gpu = 120}, {gpu = 90})
  r = request.build(T.job_desc {time_limit = NO_VAL, partition = T.NIL}, 1, flagged)
  T.eq(r.partition, "gpu", "the default partition")
  T.eq(r.default_time_limit_minutes, 90, "and its DefaultTime")
  T.eq(request.build(T.job_desc {time_limit = NO_VAL}, 1).default_time_limit_minutes, nil, "no part_list")
  local jd = T.job_desc {time_limit = NO_VAL, partition = "debug"}
  request.build(jd, 1, parts)
  T.same(jd, T.job_desc {time_limit = NO_VAL, partition = "debug"}, "job_desc not modified")
end)

T.test("the default limit is looked up by the job's own partition names, not the request's text", function()
  -- A name with a byte that is not UTF-8 travels as "sh?ort", which names no partition in part_list;
  -- MaxTime was read by the real name (harp.main), the default limit by the text: none was sent.
  local odd = "sh\255ort"
  local parts = T.part_list({odd, "long"}, "long", false, {[odd] = 100, long = 2880}, {[odd] = 30, long = 600})
  local r = request.build(T.job_desc {partition = odd, time_limit = NO_VAL}, 1, parts)
  T.eq(r.partition, "sh?ort", "the request's text")
  T.eq(r.default_time_limit_minutes, 30, "the partition's DefaultTime")
  -- the default partition, when none was given, by its own name too
  parts = T.part_list({odd, "long"}, odd, false, {}, {[odd] = 45})
  r = request.build(T.job_desc {partition = T.NIL, time_limit = NO_VAL}, 1, parts)
  T.eq(r.partition, "sh?ort", "the default partition's text")
  T.eq(r.default_time_limit_minutes, 45, "the default partition's DefaultTime")
  -- a list past what a request carries: the partitions past the cut count too (harp.main leaves such
  -- a job alone before any request is built, but the request does not hide them)
  local long = string.rep("p", 250)
  parts = T.part_list({long, "short"}, long, false, {}, {[long] = 600, short = 20})
  r = request.build(T.job_desc {partition = long .. ",short", time_limit = NO_VAL}, 1, parts)
  T.eq(#r.partition, request.MAX_STRING, "the text is cut")
  T.eq(r.default_time_limit_minutes, 20, "the smallest over the whole list")
  T.eq(request.partition_names(T.job_desc {partition = odd}, parts), odd, "the names as given")
end)

T.test("a time limit given, UNLIMITED or unreadable: no default is sent", function()
  local parts = T.part_list(PARTS, "batch", false, {debug = 60}, {debug = 30})
  local function sent(over) return request.build(T.job_desc(over), 1, parts) end
  local r = sent {time_limit = 45, partition = "debug"}
  T.eq(r.time_limit_minutes, 45, "the user's own")
  T.eq(r.default_time_limit_minutes, nil, "no default beside it")
  T.eq(sent({time_limit = 0, partition = "debug"}).default_time_limit_minutes, nil, "0 is a limit given")
  T.eq(sent({time_limit = INFINITE, partition = "debug"}).default_time_limit_minutes, nil, "--time=UNLIMITED")
  for _, bad in ipairs {1.5, -1, "x", 0 / 0} do
    r = sent {time_limit = bad, partition = "debug"}
    T.eq(r.default_time_limit_minutes, nil, "a value that is no count: " .. tostring(bad))
    T.eq(r.time_limit_minutes, nil, "nor a limit: " .. tostring(bad))
  end
  local raising = setmetatable({}, {__index = function(_, k)
    if k == "time_limit" then error("boom") end
    return T.job_desc {partition = "debug"}[k]
  end})
  r = request.build(raising, 1, parts)
  T.eq(r.default_time_limit_minutes, nil, "a raising time_limit is not none given")
  T.eq(r.time_limit_minutes, nil, "nor a limit")
  T.eq(r.partition, "debug", "the rest is kept")
end)

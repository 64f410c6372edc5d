-- Fuzz of the request builder and the whole submit path with random job_desc tables, for a bounded
-- time (HARP_FUZZ_SECONDS, default 3; HARP_FUZZ_SEED to replay a failure, printed on failure).
-- Asserted for every job: nothing raises; the request holds only valid UTF-8 strings of bounded
-- length and counts in range; a daemon that is unreachable or answers bad_request leaves the job
-- exactly as it was, without tripping the breaker for what the job holds; any decision lowers a
-- limit at most, never raises it, and a --mem-per-cpu job's memory (per CPU x CPUs) is never raised
-- and only lowered by a memory decision; every slurmctld log line is one line.
local T = ...
local main = require "harp.main"
local request = require "harp.request"
local pb = require "harp.pb"
local W = require "pbtest"

local BUDGET_S = tonumber(os.getenv("HARP_FUZZ_SECONDS") or "") or 3
local SEED = tonumber(os.getenv("HARP_FUZZ_SEED") or "") or os.time()
local random, floor, char, concat = math.random, math.floor, string.char, table.concat
local NO_VAL, INFINITE, NO_VAL16 = 4294967294, 4294967295, 65534
local MAX_EXACT = 2 ^ 53

local function valid_utf8(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local len = c < 0x80 and 1 or (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF) and 3
      or (c >= 0xF0 and c <= 0xF4) and 4 or nil
    if not len or i + len - 1 > n then return false end
    for j = i + 1, i + len - 1 do
      local b = s:byte(j)
      if b < 0x80 or b > 0xBF then return false end
    end
    local c2 = s:byte(i + 1)
    if (c == 0xE0 and c2 < 0xA0) or (c == 0xED and c2 > 0x9F) or (c == 0xF0 and c2 < 0x90)
      or (c == 0xF4 and c2 > 0x8F) then
      return false -- overlong, surrogate, above U+10FFFF
    end
    i = i + len
  end
  return true
end

local PIECES = {"é", "😀", "\xff", "\xc3", "\xed\xa0\x80", "\xf0\x9f\x98", "\n", "\r", "\0", "%s", "%d",
  "harp:", "harp:t=1>2", "#SBATCH -t 5\n", "\\", "\x1b[31m", "a", " ",
  "gres:gpu:", "gres/gpu=", "gpu:a100:", "4", "99999999999999999999", ","}

local function random_string()
  local r = random()
  if r < 0.05 then return "" end
  local n = r < 0.9 and random(1, 40) or r < 0.98 and random(200, 700) or random(20000, 120000)
  if random() < 0.5 then -- random bytes
    local out = {}
    for i = 1, n do out[i] = char(random(0, 255)) end
    return concat(out)
  end
  local out = {}
  while #out < n do out[#out + 1] = PIECES[random(#PIECES)] end
  return concat(out)
end

local NUMBERS = {0, 1, -1, 0.5, -0.5, 60.7, NO_VAL, INFINITE, NO_VAL16, NO_VAL16 + 1, 2 ^ 31, 2 ^ 32,
  MAX_EXACT, MAX_EXACT + 2, 2 ^ 64, -(2 ^ 63), 1e308, math.huge, -math.huge}

local function random_number()
  local r = random()
  if r < 0.4 then return NUMBERS[random(#NUMBERS)] end
  if r < 0.45 then return 0 / 0 end
  return random(0, 100000)
end

local EXPLODING = setmetatable({}, {__index = function() error("field read failed in C") end,
  __tostring = function() error("tostring failed") end})

local function wrong_type()
  local kinds = {function() return true end, function() return {} end, function() return print end,
    function() return EXPLODING end, function() return random_number() end, function() return random_string() end}
  return kinds[random(#kinds)]()
end

local STRINGS = {"user_name", "account", "partition", "qos", "name", "work_dir", "tres_per_node", "array_inx",
  "comment", "admin_comment", "script", "tres_per_job", "tres_per_socket", "tres_per_task"}
local COUNTS = {"user_id", "time_limit", "time_min", "min_mem_per_node", "min_mem_per_cpu", "min_cpus",
  "cpus_per_task", "num_tasks", "min_nodes", "max_nodes", "ntasks_per_node", "ntasks_per_socket",
  "sockets_per_node", "ntasks_per_tres"}

-- Returns job_desc, and whether every field has the type slurmctld gives it.
local function random_job()
  local jd, typed = {}, true
  for _, k in ipairs(STRINGS) do
    local r = random()
    if r < 0.03 then jd[k] = wrong_type(); typed = typed and type(jd[k]) == "string"
    elseif r < 0.7 then jd[k] = random_string() end
  end
  if random() < 0.5 and type(jd.script) ~= "table" and type(jd.script) ~= "function" and jd.script ~= true then
    jd.script = "#!/bin/sh\n#SBATCH -t 60\n" .. (jd.script or "")
  end
  for _, k in ipairs(COUNTS) do
    local r = random()
    if r < 0.03 then jd[k] = wrong_type(); typed = typed and type(jd[k]) == "number"
    elseif r < 0.8 then jd[k] = random_number() end
  end
  return jd, typed
end

-- A part_list of random records (numbers, sentinels, wrong types, raising reads) for the partitions
-- a job may name, or no table at all.
local function random_part_list(jd)
  local r = random()
  if r < 0.1 then return wrong_type() end
  local list, names = {}, type(jd.partition) == "string" and jd.partition or random_string()
  for name in names:gmatch("[^,]+") do
    if random() < 0.8 then
      local fields = {name = name, flag_default = random(0, 1), max_time = random_number(),
        default_time = random() < 0.9 and random_number() or wrong_type()}
      list[name] = random() < 0.05 and EXPLODING
        or setmetatable({}, {__index = function(_, k) return fields[k] end})
    end
  end
  return list
end

local function same(a, b)
  return rawequal(a, b) or (a ~= a and b ~= b) -- NaN stays NaN
end

local function snapshot(jd)
  local s = {}
  for k, v in pairs(jd) do s[k] = v end
  return s
end

local function unchanged(before, jd)
  for k, v in pairs(before) do
    if not same(jd[k], v) then return false, k end
  end
  for k in pairs(jd) do
    if before[k] == nil then return false, k end
  end
  return true
end

local STRING_FIELDS = {"user_name", "account", "partition", "qos", "job_name", "work_dir", "script_signature",
  "tres_per_node"}
local COUNT_FIELDS = {"user_id", "time_limit_minutes", "time_min_minutes", "mem_per_node_mb", "mem_per_cpu_mb",
  "min_cpus", "cpus_per_task", "num_tasks", "min_nodes", "gpus_per_node", "default_time_limit_minutes"}

local function check_request(r)
  for _, k in ipairs(STRING_FIELDS) do
    local v = r[k]
    if v ~= nil then
      T.ok(type(v) == "string" and #v <= request.MAX_STRING and valid_utf8(v), "request." .. k .. " is bounded UTF-8")
    end
  end
  for _, k in ipairs(COUNT_FIELDS) do
    local v = r[k]
    if v ~= nil then
      T.ok(type(v) == "number" and v >= 0 and v <= MAX_EXACT and floor(v) == v, "request." .. k .. " is a count")
    end
  end
  T.ok(r.default_time_limit_minutes == nil or r.time_limit_minutes == nil, "a default only without a limit")
  T.ok(type(pb.encode_request(r)) == "string", "encodes")
end

local function transport(reply)
  return {call = function() if reply then return reply end return nil, "connect: no such file" end}
end

local BAD_REQUEST = W.decision {targets = {{target = 1, action = 0, reason = 8}, {target = 2, action = 0, reason = 8},
  {target = 3, action = 0, reason = 8}}, mode = "off"}

-- The encoded decision, and whether it asks to lower memory.
local function random_decision()
  local targets, memory = {}, false
  for i = 1, random(0, 4) do
    local nv = ({0, 1, 5, 59, 60, 1024, NO_VAL, 2 ^ 40, MAX_EXACT})[random(9)]
    targets[i] = {target = random(0, 3), action = random(0, 3), new_value = random() < 0.8 and nv or nil,
      model_version = "m"}
    memory = memory or (targets[i].target == 2 and targets[i].action == 2)
  end
  return W.decision {targets = targets, mode = ({"rewrite", "extend", "time_min", "shadow", "off", "??"})[random(6)],
    annotation = random() < 0.5 and "harp:t=1>2" or random_string(), user_message = random_string()}, memory
end

-- A CPU cut in rewrite mode, with or without a memory decision; half the time on a job given a
-- valid --mem-per-cpu, --cpus-per-task and task count (random jobs seldom have all three).
local function cpu_decision(jd)
  if random() < 0.5 then
    local cpt, tasks = random(1, 64), random(1, 4)
    jd.min_mem_per_node, jd.min_mem_per_cpu, jd.cpus_per_task, jd.num_tasks = nil, random(1, 5000), cpt, tasks
    jd.min_cpus = random() < 0.8 and cpt * tasks or random(1, 300)
  end
  local targets = {{target = 3, action = 2, new_value = random(1, 64), model_version = "m"}}
  if random() < 0.5 then targets[2] = {target = 2, action = 2, new_value = random(1, 100000), model_version = "m"} end
  return W.decision {targets = targets, mode = "rewrite", annotation = "", user_message = ""}, targets[2] ~= nil
end

-- Whether a --mem-per-cpu job's CPUs were cut.
local function per_cpu_cut(before, jd)
  return type(before.cpus_per_task) == "number" and type(jd.cpus_per_task) == "number"
    and jd.cpus_per_task < before.cpus_per_task
end

local function config()
  return {socket = "/nonexistent/harp.sock", deadline_ms = 50, breaker_seconds = 30,
    disable_file = "/nonexistent/harp.disable", log_prefix = "harp"}
end

-- min_mem_per_cpu is not among them: fewer CPUs may carry more per CPU (per_cpu_memory below).
local LIMITS = {"time_limit", "min_cpus", "min_mem_per_node", "cpus_per_task"}

-- A --mem-per-cpu job's memory, MB per CPU x the CPUs Slurm gives it (at least min_cpus, and
-- cpus_per_task for each task), or nil when the job's fields do not say.
local function per_cpu_memory(jd)
  local count16, count32, count64 = request.count16, request.count32, request.count64
  local ok, mb = pcall(function()
    local per_cpu = not count64(jd.min_mem_per_node, 1) and count64(jd.min_mem_per_cpu, 1)
    local cpt = count16(jd.cpus_per_task, 1)
    if not per_cpu or not cpt then return nil end
    return per_cpu * math.max(count32(jd.min_cpus, 1) or 0, cpt * (count32(jd.num_tasks, 1) or 1))
  end)
  return ok and mb or nil
end

local function one_line_logs()
  for _, kind in ipairs {"info", "error", "debug"} do
    for _, line in ipairs(T.logs[kind]) do
      T.ok(not line:find("[\r\n]"), "one log line: " .. line:sub(1, 80))
    end
  end
end

T.test("fuzz: random job_desc tables through the builder and the submit path", function()
  math.randomseed(SEED)
  local ok, err = pcall(function()
    local deadline, jobs, cut_jobs = os.clock() + BUDGET_S, 0, 0
    while os.clock() < deadline do
      jobs = jobs + 1
      local jd, typed = random_job()
      local before = snapshot(jd)
      local built, r = pcall(request.build, jd, random_number(), random_part_list(jd))
      T.ok(built, "build raised: " .. tostring(r))
      check_request(r)
      T.ok(unchanged(before, jd), "build only reads")

      -- Unreachable daemon, then a bad_request answer: the job is exactly as it was.
      for _, reply in ipairs {false, BAD_REQUEST} do
        T.fake_slurm()
        main.configure(config(), {transport = transport(reply or nil), clock = function() return 0 end})
        local status = main.submit(jd, 1000)
        local same_job, key = unchanged(before, jd)
        local forged = type(before.admin_comment) == "string"
          and (before.admin_comment:find("harp[:=]") or before.admin_comment:find("[\r\n]"))
        T.ok(same_job or (key == "admin_comment" and forged), "job changed at " .. tostring(key))
        if typed and reply then
          -- a partition list longer than a request carries is left alone before the daemon is asked
          local long = type(jd.partition) == "string" and #jd.partition > request.MAX_STRING
          T.eq(status, long and "left_alone" or "unchanged", "status on a bad_request answer")
        end
        one_line_logs()
        for k, v in pairs(before) do jd[k] = v end
      end

      -- Any decision, then a CPU cut (rare among random decisions): a limit is lowered at most.
      for _, decide in ipairs {random_decision, cpu_decision} do
        T.fake_slurm()
        local reply, lowers_memory = decide(jd)
        local given = snapshot(jd)
        main.configure(config(), {transport = transport(reply), clock = function() return 0 end})
        local mb_before = per_cpu_memory(jd)
        main.submit(jd, 1000)
        for _, k in ipairs(LIMITS) do
          local was, now = given[k], jd[k]
          if type(was) == "number" and was == was and was >= 1 and was < NO_VAL16 and type(now) == "number" then
            T.ok(now <= was, k .. " raised from " .. was .. " to " .. now)
          end
        end
        local mb_after = mb_before and mb_before < MAX_EXACT and per_cpu_memory(jd)
        if mb_after then
          cut_jobs = cut_jobs + (per_cpu_cut(given, jd) and 1 or 0)
          T.ok(mb_after <= mb_before, "memory per CPU x CPUs raised from " .. mb_before .. " to " .. mb_after)
          T.ok(mb_after >= mb_before or lowers_memory, "memory per CPU x CPUs cut from " .. mb_before .. " to "
            .. mb_after .. " with no memory decision")
        end
        one_line_logs()
        for k in pairs(jd) do if before[k] == nil then jd[k] = nil end end
        for k, v in pairs(before) do jd[k] = v end
      end
    end
    T.ok(jobs > 50, "fuzzed " .. jobs .. " jobs")
    T.ok(cut_jobs > 0, "no CPU cut of a --mem-per-cpu job in " .. jobs .. " jobs")
  end)
  if not ok then error(tostring(err) .. "\n     (replay: HARP_FUZZ_SEED=" .. SEED .. ")", 0) end
end)

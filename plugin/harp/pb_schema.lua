-- The harp.v1 messages (proto/harp/v1/predictor.proto) as harp.pb reads and writes them: field
-- number, name, kind, and the bounds a reply must keep. Kinds: string, bool, uint32, uint64, int64,
-- enum, double, message.

local M = {}

-- field number, name, kind
M.REQUEST = {
  {1, "user_name", "string"}, {2, "user_id", "uint32"}, {3, "account", "string"},
  {4, "partition", "string"}, {5, "qos", "string"}, {6, "job_name", "string"},
  {7, "work_dir", "string"}, {8, "script_signature", "string"},
  {9, "time_limit_minutes", "uint64"}, {10, "time_min_minutes", "uint64"},
  {11, "mem_per_node_mb", "uint64"}, {12, "mem_per_cpu_mb", "uint64"},
  {13, "min_cpus", "uint32"}, {14, "cpus_per_task", "uint32"}, {15, "num_tasks", "uint32"},
  {16, "min_nodes", "uint32"}, {17, "gpus_per_node", "uint32"}, {18, "tres_per_node", "string"},
  {19, "is_array", "bool"}, {20, "submit_time", "int64"}, {21, "default_time_limit_minutes", "uint64"},
}

-- harp.v1.AdviceRequest as the cli_filter hook sends it: the job (a REQUEST) and its own --exclusive
-- (sent only when true: proto3's false is the field left out). The hook sends no partitions, deadline,
-- budget nor training (fields 2 to 5).
M.ADVICE_REQUEST = {{1, "job", "message"}, {6, "exclusive", "bool"}}

-- A Decision is bounded field by field, at what the daemon can send (core/message.py, core/tag.py,
-- core/policy.py; tests/unit/test_lua_plugin.py makes its longest) with room to spare: a string
-- longer than its `len`, more than MAX_TARGETS targets, or more than MAX_EXTRA unknown or repeated
-- fields in one message is not a Decision but a broken or hostile reply, and decoding stops there
-- (nil, err). harp.main bounds the reply's size (16 KiB), but within it 16 KiB of 2-byte fields took
-- 2.6 ms to decode.
M.MAX_TARGETS = 16 -- the daemon sends one per target it knows: three
M.MAX_EXTRA = 8 -- per message: fields a newer daemon may add; the daemon repeats none
local TARGET_DECISION = {
  name = "TargetDecision",
  fields = {
    [1] = {"target", "enum"}, [2] = {"action", "enum"}, [3] = {"predicted", "double"},
    [4] = {"quantile", "double"}, [5] = {"new_value", "uint64"}, [6] = {"reason", "enum"},
    -- a store version's name: 23 bytes; "proposed N vs asked X": 339 bytes for N = 1.8e308
    [7] = {"model_version", "string", len = 64}, [8] = {"detail", "string", len = 512},
  },
  -- proto3 implicit-presence fields get their defaults; `optional` ones stay nil when absent
  defaults = {target = 0, action = 0, reason = 0, model_version = "", detail = ""},
  max_extra = M.MAX_EXTRA,
}

M.DECISION = {
  name = "Decision",
  fields = {
    [1] = {"targets", "message", TARGET_DECISION, repeated = true, max = M.MAX_TARGETS},
    -- one line for sbatch: 179 bytes at most; the admin_comment tag: 111, its numbers capped at 2^53
    -- (harp.apply appends none over 512)
    [2] = {"user_message", "string", len = 512}, [3] = {"annotation", "string", len = 1024},
    [4] = {"mode", "string", len = 16}, -- "time_min" the longest
  },
  defaults = {user_message = "", annotation = "", mode = ""},
  max_extra = M.MAX_EXTRA,
}

-- harp.v1.Advice (the advice socket's answer, docs/advice.md). Advice.pareto (packed) is not read.
-- The daemon sends an option per candidate partition and size (at most 16 sizes a partition) and a
-- few notes: the caps are far above that, and stop a hostile answer early (1 MiB of empty options
-- took 991 ms and 361 MB inside sbatch, past the call's deadline).
M.MAX_OPTIONS = 4096
M.MAX_NOTES = 64
local ADVICE_OPTION = {
  name = "AdviceOption",
  max_extra = M.MAX_EXTRA,
  fields = {
    [1] = {"partition", "string"}, [2] = {"size", "uint32"}, [3] = {"cpus", "uint32"}, [4] = {"nodes", "uint32"},
    [5] = {"gpus", "uint32"}, [6] = {"mem_per_node_mb", "uint64"}, [7] = {"evidence", "string"},
    [8] = {"priced", "bool"}, [9] = {"time_limit_minutes", "uint64"}, [10] = {"expected_minutes", "double"},
    [11] = {"longest_minutes", "double"}, [12] = {"expected_cost", "double"}, [13] = {"rate", "double"},
    [14] = {"expected_attempts", "double"}, [15] = {"p_unfinished", "double"}, [16] = {"note", "string"},
  },
  defaults = {partition = "", size = 0, cpus = 0, nodes = 0, gpus = 0, mem_per_node_mb = 0, evidence = "",
    priced = false, time_limit_minutes = 0, expected_minutes = 0, longest_minutes = 0, expected_cost = 0,
    rate = 0, expected_attempts = 0, p_unfinished = 0, note = ""},
}

M.ADVICE = {
  name = "Advice",
  max_extra = M.MAX_EXTRA,
  fields = {
    [1] = {"user_name", "string"}, [2] = {"job_name", "string"}, [3] = {"unit", "string"},
    [4] = {"currency", "string"}, [5] = {"evidence", "string"},
    [6] = {"options", "message", ADVICE_OPTION, repeated = true, max = M.MAX_OPTIONS},
    [7] = {"cheapest", "uint32"}, [8] = {"fastest", "uint32"}, -- optional: nil when absent
    [10] = {"notes", "string", repeated = true, max = M.MAX_NOTES},
  },
  defaults = {user_name = "", job_name = "", unit = "", currency = "", evidence = ""},
}

M.TARGET = {UNSPECIFIED = 0, TIME = 1, MEMORY = 2, CPUS = 3}
M.ACTION = {NONE = 0, ANNOTATE = 1, REWRITE = 2, SET_TIME_MIN = 3}

M.TARGET_DECISION, M.ADVICE_OPTION = TARGET_DECISION, ADVICE_OPTION

return M

-- Minimal protobuf for harp.v1 (proto/harp/v1/predictor.proto) in pure Lua 5.1.
-- Numbers are doubles: integers are exact up to 2^53, which covers every value we send.
-- Encoding skips values that do not fit their field; decoding never throws (nil, err).

local floor, ldexp = math.floor, math.ldexp
local byte, char, concat, sub = string.byte, string.char, table.concat, string.sub
local pairs, ipairs, type, pcall, tostring = pairs, ipairs, type, pcall, tostring

local M = {}

local TWO32 = 4294967296
local MAX_EXACT = 9007199254740992 -- 2^53
local MAX_DEPTH = 4

-- field number -> {name, kind}; kinds: string, bool, uint32, uint64, int64, enum, double, message
local REQUEST = {
  {1, "user_name", "string"}, {2, "user_id", "uint32"}, {3, "account", "string"},
  {4, "partition", "string"}, {5, "qos", "string"}, {6, "job_name", "string"},
  {7, "work_dir", "string"}, {8, "script_signature", "string"},
  {9, "time_limit_minutes", "uint64"}, {10, "time_min_minutes", "uint64"},
  {11, "mem_per_node_mb", "uint64"}, {12, "mem_per_cpu_mb", "uint64"},
  {13, "min_cpus", "uint32"}, {14, "cpus_per_task", "uint32"}, {15, "num_tasks", "uint32"},
  {16, "min_nodes", "uint32"}, {17, "gpus_per_node", "uint32"}, {18, "tres_per_node", "string"},
  {19, "is_array", "bool"}, {20, "submit_time", "int64"}, {21, "default_time_limit_minutes", "uint64"},
}

-- A Decision is bounded field by field, at what the daemon can send (core/message.py, core/policy.py;
-- tests/unit/test_lua_plugin.py makes its longest) with room to spare: a string longer than its `len`,
-- more than MAX_TARGETS targets, or more than MAX_EXTRA unknown or repeated fields in one message is
-- not a Decision but a broken or hostile reply, and decoding stops there (nil, err). harp.main bounds
-- the reply's size (16 KiB), but within it 16 KiB of 2-byte fields took 2.6 ms to decode.
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

local DECISION = {
  name = "Decision",
  fields = {
    [1] = {"targets", "message", TARGET_DECISION, repeated = true, max = M.MAX_TARGETS},
    -- one line for sbatch: 179 bytes at most; the admin_comment tag: 180 bytes for predictions of
    -- float32's largest, 990 for float64's (harp.apply appends none over 512)
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

local ADVICE = {
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

M.SUBMIT_REQUEST_FIELDS = REQUEST
M.TARGET = {UNSPECIFIED = 0, TIME = 1, MEMORY = 2, CPUS = 3}
M.ACTION = {NONE = 0, ANNOTATE = 1, REWRITE = 2, SET_TIME_MIN = 3}

---------------------------------------------------------------- encoding

local function varint(n)
  if n < 128 then return char(n) end -- tags and most values: no table
  local out, i = {}, 0
  while n >= 128 do
    i = i + 1
    out[i] = char(n % 128 + 128)
    n = floor(n / 128)
  end
  out[i + 1] = char(n)
  return concat(out)
end
M.varint = varint

local function is_int(v, lo, hi)
  return type(v) == "number" and v == v and v >= lo and v <= hi and floor(v) == v
end

local LIMITS = {uint32 = TWO32 - 1, uint64 = MAX_EXACT, int64 = MAX_EXACT}

-- Each request field's key (field number and wire type) as bytes, made once.
local KEYS = {}
for i, f in ipairs(REQUEST) do
  KEYS[i] = varint(f[1] * 8 + (f[3] == "string" and 2 or 0))
end

-- SubmitRequest table (proto field names) -> bytes. Absent or ill-typed fields are left out, and
-- so is a value that does not fit its field.
function M.encode_request(req)
  local parts, n = {}, 0
  for i = 1, #REQUEST do
    local f = REQUEST[i]
    local v = req[f[2]]
    if v ~= nil then
      local kind = f[3]
      if kind == "string" then
        if type(v) == "string" then
          parts[n + 1], parts[n + 2], parts[n + 3] = KEYS[i], varint(#v), v
          n = n + 3
        end
      elseif kind == "bool" then
        if type(v) == "boolean" then
          parts[n + 1], parts[n + 2] = KEYS[i], v and "\1" or "\0"
          n = n + 2
        end
      -- int64 negatives would need exact 64-bit two's complement; no field of ours is negative
      elseif is_int(v, 0, LIMITS[kind] or -1) then
        parts[n + 1], parts[n + 2] = KEYS[i], varint(v)
        n = n + 2
      end
    end
  end
  return concat(parts, "", 1, n)
end

-- AdviceRequest with only its `job` (a SubmitRequest table): every partition compared, no deadline,
-- no budget, no training facts.
function M.encode_advice_request(job)
  local inner = M.encode_request(job)
  return varint(1 * 8 + 2) .. varint(#inner) .. inner
end

---------------------------------------------------------------- decoding

local function read_varint(s, pos, len)
  if pos > len then return nil, "truncated varint" end
  local b = byte(s, pos)
  if b < 128 then return b, pos + 1 end -- tags, lengths and most values: one byte
  local v, mul = b - 128, 128
  for i = 1, 9 do
    local p = pos + i
    if p > len then return nil, "truncated varint" end
    b = byte(s, p)
    if b < 128 then return v + b * mul, p + 1 end
    v = v + (b - 128) * mul
    mul = mul * 128
  end
  return nil, "varint too long"
end

local function read_double(s, pos)
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, pos, pos + 7)
  local sign = b8 >= 128 and -1 or 1
  local exp = (b8 % 128) * 16 + floor(b7 / 16)
  local mant = ((((((b7 % 16) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 256 + b1
  if exp == 0 then
    return sign * ldexp(mant, -1074)
  elseif exp == 2047 then
    return mant == 0 and sign * (1 / 0) or (0 / 0)
  end
  return sign * ldexp(mant + 4503599627370496, exp - 1075)
end

local decode_message

-- f: the field's spec, nil for an unknown field
local function decode_value(f, kind, wire, s, pos, len, depth)
  if wire == 0 then
    local v, np = read_varint(s, pos, len)
    if not v then return nil, np end
    if kind == "bool" then v = v ~= 0
    elseif kind == "int64" and v >= 9223372036854775808 then v = v - 18446744073709551616 end
    return v, np
  elseif wire == 1 then
    if pos + 7 > len then return nil, "truncated fixed64" end
    return (kind == "double") and read_double(s, pos) or nil, pos + 8
  elseif wire == 5 then
    if pos + 3 > len then return nil, "truncated fixed32" end
    return nil, pos + 4
  elseif wire == 2 then
    local n, np = read_varint(s, pos, len)
    if not n then return nil, np end
    if f and f.len and n > f.len then return nil, f[1] .. " longer than " .. f.len .. " bytes" end
    local e = np + n - 1
    if e > len then return nil, "truncated length-delimited field" end
    if kind == "message" then
      local m, err = decode_message(s, np, e, f[3], depth + 1)
      if not m then return nil, err end
      return m, e + 1
    end
    return sub(s, np, e), e + 1
  end
  return nil, "unsupported wire type " .. tostring(wire)
end

local EXPECTED_WIRE = {string = 2, message = 2, double = 1}

decode_message = function(s, pos, last, schema, depth)
  if depth > MAX_DEPTH then return nil, "message nested too deep" end
  local out = {}
  local lists = schema.lists
  for i = 1, #lists do out[lists[i]] = {} end
  local extra, max_extra = 0, schema.max_extra
  while pos <= last do
    local key, np = read_varint(s, pos, last)
    if not key then return nil, np end
    local wire = key % 8
    local num = (key - wire) / 8
    if num == 0 then return nil, "field number 0" end
    local f = schema.fields[num]
    local kind = f and f[2]
    -- a known field on an unexpected wire type is handled like an unknown field
    if f and (EXPECTED_WIRE[kind] or 0) ~= wire then kind, f = nil, nil end
    if max_extra and (not f or (not f.repeated and out[f[1]] ~= nil)) then
      extra = extra + 1
      if extra > max_extra then
        return nil, "more than " .. max_extra .. " unknown or repeated fields in a " .. schema.name
      end
    end
    local v
    v, np = decode_value(f, kind, wire, s, np, last, depth)
    if np == nil or type(np) == "string" then return nil, np or "bad field" end
    if f and v ~= nil then
      if f.repeated then
        local list = out[f[1]]
        local n = #list + 1
        if f.max and n > f.max then return nil, "more than " .. f.max .. " " .. f[1] end
        list[n] = v
      else
        out[f[1]] = v
      end
    end
    pos = np
  end
  local names, values = schema.default_names, schema.default_values
  for i = 1, #names do
    local k = names[i]
    if out[k] == nil then out[k] = values[i] end
  end
  return out
end

-- Once per schema: its repeated fields and its defaults as arrays, read by every decode.
local function prepare(schema)
  schema.lists, schema.default_names, schema.default_values = {}, {}, {}
  for _, f in pairs(schema.fields) do
    if f.repeated then schema.lists[#schema.lists + 1] = f[1] end
  end
  for k, d in pairs(schema.defaults) do
    schema.default_names[#schema.default_names + 1] = k
    schema.default_values[#schema.default_values + 1] = d
  end
end
for _, schema in ipairs {TARGET_DECISION, DECISION, ADVICE_OPTION, ADVICE} do prepare(schema) end

local function decode(s, schema, what)
  if type(s) ~= "string" then return nil, what .. " is not a string" end
  local ok, res, err = pcall(decode_message, s, 1, #s, schema, 1)
  if not ok then return nil, "decode failed: " .. tostring(res) end
  if not res then return nil, err end
  return res
end

-- Decision bytes -> table {targets = {...}, user_message, annotation, mode}, or nil, err.
function M.decode_decision(s)
  return decode(s, DECISION, "decision")
end

-- Advice bytes -> table {options = {...}, cheapest, fastest, unit, currency, notes, ...}, or nil, err.
function M.decode_advice(s)
  return decode(s, ADVICE, "advice")
end

return M

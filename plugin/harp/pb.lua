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

local messages = require "harp.pb_schema"
local REQUEST, DECISION, ADVICE = messages.REQUEST, messages.DECISION, messages.ADVICE
local ADVICE_REQUEST = messages.ADVICE_REQUEST
M.MAX_TARGETS, M.MAX_EXTRA = messages.MAX_TARGETS, messages.MAX_EXTRA
M.MAX_OPTIONS, M.MAX_NOTES = messages.MAX_OPTIONS, messages.MAX_NOTES
M.TARGET, M.ACTION = messages.TARGET, messages.ACTION

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

-- AdviceRequest of `job` (a SubmitRequest table) and, when `exclusive` is true, the job's own
-- --exclusive: every partition compared, no deadline, no budget, no training facts.
function M.encode_advice_request(job, exclusive)
  local given = {job = job, exclusive = exclusive}
  local parts = {}
  for _, f in ipairs(ADVICE_REQUEST) do
    local number, name, kind = f[1], f[2], f[3]
    if kind == "message" then
      local inner = M.encode_request(given[name])
      parts[#parts + 1] = varint(number * 8 + 2) .. varint(#inner) .. inner
    elseif given[name] == true then -- a bool: false is proto3's default, left out
      parts[#parts + 1] = varint(number * 8) .. "\1"
    end
  end
  return concat(parts)
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
for _, message in ipairs {messages.TARGET_DECISION, DECISION, messages.ADVICE_OPTION, ADVICE} do prepare(message) end

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

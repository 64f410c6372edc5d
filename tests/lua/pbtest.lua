-- Test-side protobuf writer for Decision and Advice messages (the plugin only ever decodes them).
local pb = require "harp.pb"
local V = pb.varint

local M = {}

local function hex(h) return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)) end
M.hex = hex
function M.tohex(s) return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end)) end

M.DOUBLE_42_5 = hex("0000000000404540")
M.DOUBLE_0_9 = hex("cdccccccccccec3f")

function M.str(n, s) return V(n * 8 + 2) .. V(#s) .. s end
function M.uint(n, v) return V(n * 8) .. V(v) end
function M.fixed64(n, raw8) return V(n * 8 + 1) .. raw8 end
function M.fixed32(n, raw4) return V(n * 8 + 5) .. raw4 end

-- t: {target=, action=, new_value=, reason=, model_version=, detail=, predicted=raw8, quantile=raw8}
function M.target(t)
  local out = {}
  if t.target then out[#out + 1] = M.uint(1, t.target) end
  if t.action then out[#out + 1] = M.uint(2, t.action) end
  if t.predicted then out[#out + 1] = M.fixed64(3, t.predicted) end
  if t.quantile then out[#out + 1] = M.fixed64(4, t.quantile) end
  if t.new_value then out[#out + 1] = M.uint(5, t.new_value) end
  if t.reason then out[#out + 1] = M.uint(6, t.reason) end
  if t.model_version then out[#out + 1] = M.str(7, t.model_version) end
  if t.detail then out[#out + 1] = M.str(8, t.detail) end
  return table.concat(out)
end

-- d: {targets = {...}, user_message=, annotation=, mode=}
function M.decision(d)
  local out = {}
  for _, t in ipairs(d.targets or {}) do out[#out + 1] = M.str(1, M.target(t)) end
  if d.user_message then out[#out + 1] = M.str(2, d.user_message) end
  if d.annotation then out[#out + 1] = M.str(3, d.annotation) end
  if d.mode then out[#out + 1] = M.str(4, d.mode) end
  return table.concat(out)
end

-- 8 little-endian bytes of a finite double >= 0 (what the daemon writes for costs and minutes).
function M.double(v)
  if v == 0 then return string.rep("\0", 8) end
  local m, e = math.frexp(v) -- v = m * 2^e, 0.5 <= m < 1
  local exp, mant = e + 1022, (m * 2 - 1) * 2 ^ 52
  local out = {}
  for i = 1, 6 do
    out[i] = string.char(mant % 256)
    mant = math.floor(mant / 256)
  end
  out[7] = string.char(mant + (exp % 16) * 16)
  out[8] = string.char(math.floor(exp / 16))
  return table.concat(out)
end

-- o: {partition=, size=, cpus=, nodes=, priced=, expected_minutes=, expected_cost=, p_unfinished=}
function M.option(o)
  local out = {M.str(1, o.partition or "batch"), M.uint(2, o.size), M.uint(3, o.cpus or o.size),
    M.uint(4, o.nodes or 1), M.str(7, o.evidence or "log-log fit")}
  if o.priced ~= false then
    out[#out + 1] = M.uint(8, 1)
    out[#out + 1] = M.uint(9, o.limit or 60)
    out[#out + 1] = M.fixed64(10, M.double(o.expected_minutes))
    out[#out + 1] = M.fixed64(12, M.double(o.expected_cost))
    if o.p_unfinished then out[#out + 1] = M.fixed64(15, M.double(o.p_unfinished)) end
  end
  return table.concat(out)
end

-- a: {unit=, currency=, evidence=, options = {...}, cheapest=, notes = {...}}
function M.advice(a)
  local out = {M.str(1, a.user_name or "alice"), M.str(2, a.job_name or "relax"), M.str(3, a.unit or "CPU"),
    M.str(4, a.currency or "EUR"), M.str(5, a.evidence or "2 runs")}
  for _, o in ipairs(a.options or {}) do out[#out + 1] = M.str(6, M.option(o)) end
  if a.cheapest then out[#out + 1] = M.uint(7, a.cheapest) end
  out[#out + 1] = M.str(9, "\0\1") -- pareto, packed: skipped by the decoder
  for _, n in ipairs(a.notes or {}) do out[#out + 1] = M.str(10, n) end
  return table.concat(out)
end

-- A Decision of every target the daemon knows lowered, each string at harp.pb's bound (the annotation
-- at the 512 bytes harp.apply appends), and MAX_EXTRA fields of a newer daemon in every message.
function M.maximal_decision()
  local extra = string.rep(M.uint(99, 1), pb.MAX_EXTRA)
  local targets = {}
  for target, value in ipairs {60, 2000, 2} do
    targets[target] = M.str(1, M.target {target = target, action = 2, new_value = value,
      predicted = M.DOUBLE_42_5, quantile = M.DOUBLE_0_9, reason = 0,
      model_version = string.rep("v", 64), detail = string.rep("d", 512)} .. extra)
  end
  return table.concat(targets) .. M.str(2, "harp: lowered" .. string.rep(".", 499))
    .. M.str(3, "harp:rewrite," .. string.rep("x", 499)) .. M.str(4, "rewrite") .. extra
end

-- Ways to pad a valid Decision to `size` bytes (16 KiB: all harp.main takes), each a {name, bytes}.
function M.padded_decisions(size)
  local base = M.decision {targets = {{target = 1, action = 2, new_value = 60, model_version = "m"}},
    user_message = "harp: lowered time", annotation = "harp:rewrite,t!=60", mode = "rewrite"}
  local function fill(unit) return base .. string.rep(unit, math.floor((size - #base) / #unit)) end
  local in_target = string.rep(M.uint(9, 1), math.floor((size - #base) / 2) - 2)
  return {
    {"a long user_message", base .. M.str(2, string.rep("x", size - #base - 4))},
    {"unknown varint fields", fill(M.uint(9, 1))},
    {"unknown empty strings", fill(M.str(9, ""))},
    {"the mode repeated", fill(M.str(4, ""))},
    {"unknown fields in a target", base .. M.str(1, in_target)},
  }
end

return M

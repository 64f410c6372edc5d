-- Test-side protobuf writer for Decision messages (the plugin only ever decodes them).
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

return M

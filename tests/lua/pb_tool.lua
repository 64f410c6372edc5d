-- Bridge for Python tests: protobuf and request building through the plugin's own modules.
--   lua5.1 pb_tool.lua encode     stdin: JSON array of SubmitRequest tables -> JSON array of hex
--   lua5.1 pb_tool.lua build      stdin: JSON {job_desc=..., submit_uid=...} -> JSON {hex=, request=}
--   lua5.1 pb_tool.lua decode     stdin: JSON array of hex Decision bytes -> JSON array of decisions/errors
--                                 (predicted, quantile, new_value as "%.17g" strings)
--   lua5.1 pb_tool.lua signature  stdin: script text -> signature (or empty line)
local here = (arg[0]):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/../../plugin/?.lua;" .. package.path

local cjson = require "cjson"
local pb = require "harp.pb"
local request = require "harp.request"
local W = require "pbtest"

local function denull(t)
  if type(t) ~= "table" then return t end
  for k, v in pairs(t) do
    if v == cjson.null then t[k] = nil else t[k] = denull(v) end
  end
  return t
end

local mode = arg[1]
local input = io.read("*a")
if mode == "encode" then
  local out = {}
  for i, r in ipairs(denull(cjson.decode(input))) do out[i] = W.tohex(pb.encode_request(r)) end
  io.write(cjson.encode(out), "\n")
elseif mode == "build" then
  local t = denull(cjson.decode(input))
  local r = request.build(t.job_desc, t.submit_uid)
  io.write(cjson.encode {hex = W.tohex(pb.encode_request(r)), request = r}, "\n")
elseif mode == "decode" then
  local out = {}
  for i, h in ipairs(cjson.decode(input)) do
    local d, err = pb.decode_decision(W.hex(h))
    -- cjson prints 14 digits at most: numbers that must round-trip exactly travel as %.17g strings
    for _, t in ipairs(d and d.targets or {}) do
      for _, k in ipairs {"predicted", "quantile", "new_value"} do
        if t[k] then t[k] = string.format("%.17g", t[k]) end
      end
    end
    out[i] = d or {error = err}
  end
  cjson.encode_sparse_array(true)
  io.write(cjson.encode(out), "\n")
elseif mode == "signature" then
  io.write(request.script_signature(input) or "", "\n")
else
  io.stderr:write("usage: pb_tool.lua encode|build|decode|signature\n")
  os.exit(2)
end

-- Bridge for Python tests: protobuf and request building through the plugin's own modules.
--   lua5.1 pb_tool.lua encode     stdin: JSON array of SubmitRequest tables -> JSON array of hex
--   lua5.1 pb_tool.lua build      stdin: JSON {job_desc=..., submit_uid=..., part_list=...} -> JSON {hex=, request=}
--   lua5.1 pb_tool.lua decode     stdin: JSON array of hex Decision bytes -> JSON array of decisions/errors
--                                 (predicted, quantile, new_value as "%.17g" strings)
--   lua5.1 pb_tool.lua signature  stdin: script text -> harp.script_signature's (or an empty line)
--   lua5.1 pb_tool.lua advice_request  stdin: JSON array of sbatch option tables -> JSON array of
--                                 {hex = AdviceRequest bytes, request = the SubmitRequest table}
--   lua5.1 pb_tool.lua advice     stdin: JSON array of hex Advice bytes -> JSON array of
--                                 {line = the sbatch line or "", advice = decoded} (numbers as "%.17g");
--                                 each line is for a 1-CPU job (min_cpus = 1) in no partition
--   lua5.1 pb_tool.lua text       stdin: JSON array of hex strings -> JSON {max = request.MAX_STRING,
--                                 text = array of hex of request.text(string), "" for nil}
--   lua5.1 pb_tool.lua apply      stdin: JSON {job_desc=..., decision=hex, submit_uid=...} -> JSON job_desc
--                                 after harp.apply's plan and commit
--   lua5.1 pb_tool.lua read_tag   stdin: JSON array of hex tokens -> JSON array of harp.tag_parse.read's
--                                 answers: {tag=false}, or {tag=true, flag=, t=, t0=} (those it has)
local here = (arg[0]):match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. here .. "/../../plugin/?.lua;" .. package.path

local cjson = require "cjson"
local pb = require "harp.pb"
local request = require "harp.request"
local signature = require "harp.script_signature"
local sbatch_request = require "harp.sbatch_request"
local advice_line = require "harp.advice_line"
local apply = require "harp.apply"
local tag_parse = require "harp.tag_parse"
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
  local r = request.build(t.job_desc, t.submit_uid, t.part_list)
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
  io.write(signature.of(input) or "", "\n")
elseif mode == "advice_request" then
  local out = {}
  for i, o in ipairs(cjson.decode(input)) do
    local r = sbatch_request.build(o)
    out[i] = {hex = W.tohex(pb.encode_advice_request(r, sbatch_request.exclusive(o))), request = r}
  end
  io.write(cjson.encode(out), "\n")
elseif mode == "text" then
  local out = {}
  for i, h in ipairs(cjson.decode(input)) do out[i] = W.tohex(request.text(W.hex(h)) or "") end
  io.write(cjson.encode {max = request.MAX_STRING, text = out}, "\n")
elseif mode == "advice" then
  local out = {}
  for i, h in ipairs(cjson.decode(input)) do
    local a, err = pb.decode_advice(W.hex(h))
    local line = a and advice_line.line(a, {min_cpus = 1}) or ""
    for _, o in ipairs(a and a.options or {}) do
      for _, k in ipairs {"expected_minutes", "longest_minutes", "expected_cost", "rate", "expected_attempts",
        "p_unfinished"} do
        o[k] = string.format("%.17g", o[k])
      end
    end
    out[i] = a and {line = line, advice = a} or {error = err}
  end
  cjson.encode_sparse_array(true)
  io.write(cjson.encode(out), "\n")
elseif mode == "apply" then
  local t = denull(cjson.decode(input))
  local d = assert(pb.decode_decision(W.hex(t.decision)))
  assert(apply.commit(t.job_desc, apply.plan(t.job_desc, d, t.submit_uid)))
  io.write(cjson.encode(t.job_desc), "\n")
elseif mode == "read_tag" then
  local out = {}
  for i, h in ipairs(cjson.decode(input)) do
    local ok, flag, t, t0 = tag_parse.read(W.hex(h))
    out[i] = ok and {tag = true, flag = flag, t = t, t0 = t0} or {tag = false}
  end
  io.write(cjson.encode(out), "\n")
else
  io.stderr:write("usage: pb_tool.lua encode|build|decode|signature|advice_request|advice|apply|read_tag\n")
  os.exit(2)
end

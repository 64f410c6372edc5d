-- Decoding a Decision padded to 16 KiB (all harp.main takes) with a plugin's harp.pb, against the
-- daemon's usual reply and one at harp.pb's bounds: the mean time of a decode, and its outcome.
--   lua5.1 decode_padded.lua PLUGIN_DIR [DECODES]
-- The padded replies are tests/lua/pbtest.lua's; PLUGIN_DIR may hold an older harp.pb to compare.
local here = (arg[0]):match("^(.*)/[^/]*$") or "."
package.path = arg[1] .. "/?.lua;" .. here .. "/../../tests/lua/?.lua;" .. package.path
local pb = require "harp.pb"
local W = require "pbtest"
local now = require "harp.clock".now

local decodes = tonumber(arg[2]) or 500
local usual = W.decision {targets = {
    {target = 1, action = 2, new_value = 60, predicted = W.DOUBLE_42_5, quantile = W.DOUBLE_0_9,
      model_version = "20260101T000000.000000Z", detail = ""},
    {target = 2, action = 1, predicted = W.DOUBLE_42_5, reason = 6, model_version = "20260101T000000.000000Z",
      detail = "proposed 3900 vs asked 4000"},
    {target = 3, action = 1, predicted = W.DOUBLE_42_5, reason = 6, model_version = "20260101T000000.000000Z",
      detail = "proposed 4 vs asked 4"}},
  user_message = "harp: lowered time from 02:00:00 to 01:00:00 (90% of similar past jobs finished within it).",
  annotation = "harp:rewrite,t!=60/q0.9,t0=120,m=3900/q0.9,c=4/q0.9,v=20260101T000000.000000Z", mode = "rewrite"}
local cases = {{"the daemon's usual reply", usual}}
if pb.MAX_EXTRA then cases[2] = {"a reply at harp.pb's bounds", W.maximal_decision()} end
for _, case in ipairs(W.padded_decisions(16384)) do cases[#cases + 1] = {"padded: " .. case[1], case[2]} end

print(string.format("%-36s %6s %9s  %s", "reply", "bytes", "ms", "outcome"))
for _, case in ipairs(cases) do
  local name, bytes = case[1], case[2]
  local decoded, err = pb.decode_decision(bytes)
  collectgarbage()
  local t0 = now()
  for _ = 1, decodes do pb.decode_decision(bytes) end
  local ms = (now() - t0) * 1000 / decodes
  print(string.format("%-36s %6d %9.4f  %s", name, #bytes, ms, decoded and "decoded" or ("refused: " .. err)))
end

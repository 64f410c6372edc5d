local T = ...
local pb = require "harp.pb"
local W = require "pbtest"

T.test("varint encoding", function()
  T.eq(W.tohex(pb.varint(0)), "00", "0")
  T.eq(W.tohex(pb.varint(1)), "01", "1")
  T.eq(W.tohex(pb.varint(300)), "ac02", "300")
  T.eq(W.tohex(pb.varint(4294967295)), "ffffffff0f", "2^32-1")
  T.eq(W.tohex(pb.varint(2 ^ 53)), "8080808080808010", "2^53")
end)

T.test("request encoding matches hand-computed bytes", function()
  local b = pb.encode_request {user_name = "bob", time_limit_minutes = 300, is_array = true, min_cpus = 4}
  -- fields in number order: 1 "bob", 9 = 300, 13 = 4, 19 = true
  T.eq(W.tohex(b), "0a03626f6248ac026804980101", "bytes")
end)

T.test("the partition's default limit is field 21", function()
  -- key 21 * 8 + 0 = 168 = a8 01, then 30; after field 20 (submit_time), before nothing
  T.eq(W.tohex(pb.encode_request {default_time_limit_minutes = 30}), "a8011e", "alone")
  T.eq(W.tohex(pb.encode_request {submit_time = 1, default_time_limit_minutes = 2880}), "a00101a801c016",
    "in number order")
end)

T.test("request encoding keeps zero, drops ill-typed and out-of-range values", function()
  local b = pb.encode_request {
    time_limit_minutes = 0, min_cpus = 4294967296, num_tasks = -1, cpus_per_task = 1.5,
    user_name = 5, is_array = "yes", submit_time = -3, unknown_field = 1,
  }
  T.eq(W.tohex(b), "4800", "only time_limit_minutes = 0 left")
end)

T.test("decision decodes all fields, skips doubles' neighbours and unknown fields", function()
  local t1 = W.target {target = 1, action = 2, predicted = W.DOUBLE_42_5, quantile = W.DOUBLE_0_9,
    new_value = 60, reason = 0, model_version = "time-v3", detail = "q0.9"}
  local t2 = W.target {target = 2, action = 1, reason = 4, detail = "shadow"}
  local bytes = W.str(1, t1) .. W.str(1, t2)
    .. W.uint(99, 7) .. W.fixed32(98, "abcd") .. W.fixed64(97, "12345678") .. W.str(96, "zz")
    .. W.str(2, "time limit lowered") .. W.str(3, "harp:t=60") .. W.str(4, "rewrite")
  local d, err = pb.decode_decision(bytes)
  T.ok(d, err)
  T.eq(#d.targets, 2, "targets")
  local a, b = d.targets[1], d.targets[2]
  T.eq(a.target, 1, "target")
  T.eq(a.action, 2, "action")
  T.eq(a.predicted, 42.5, "predicted")
  T.eq(a.quantile, 0.9, "quantile")
  T.eq(a.new_value, 60, "new_value")
  T.eq(a.reason, 0, "reason")
  T.eq(a.model_version, "time-v3", "model_version")
  T.eq(a.detail, "q0.9", "detail")
  T.eq(b.target, 2, "target 2")
  T.eq(b.new_value, nil, "optional absent")
  T.eq(b.predicted, nil, "optional double absent")
  T.eq(b.model_version, "", "proto3 default")
  T.eq(b.reason, 4, "reason 2")
  T.eq(d.user_message, "time limit lowered", "user_message")
  T.eq(d.annotation, "harp:t=60", "annotation")
  T.eq(d.mode, "rewrite", "mode")
end)

T.test("empty decision gets proto3 defaults", function()
  local d = T.ok(pb.decode_decision(""))
  T.eq(#d.targets, 0, "targets")
  T.eq(d.user_message, "", "msg")
  T.eq(d.annotation, "", "annotation")
  T.eq(d.mode, "", "mode")
end)

T.test("large uint64 new_value decodes approximately, never throws", function()
  local d = T.ok(pb.decode_decision(W.str(1, W.uint(5, 2 ^ 60))))
  T.eq(d.targets[1].new_value, 2 ^ 60, "2^60")
end)

T.test("known field with a wrong wire type is skipped", function()
  local d = T.ok(pb.decode_decision(W.uint(2, 5) .. W.str(4, "shadow")))
  T.eq(d.user_message, "", "varint where a string belongs")
  T.eq(d.mode, "shadow", "mode")
end)

T.test("every truncation of a valid decision fails cleanly or decodes", function()
  local bytes = W.decision {targets = {{target = 1, action = 2, new_value = 300, predicted = W.DOUBLE_42_5,
    model_version = "m"}}, user_message = "hello", annotation = "harp:x", mode = "rewrite"}
  local full = T.ok(pb.decode_decision(bytes))
  T.eq(full.targets[1].new_value, 300, "full")
  local failures = 0
  for n = 0, #bytes - 1 do
    local ok, d, err = pcall(pb.decode_decision, bytes:sub(1, n))
    T.ok(ok, "no throw at " .. n)
    if d == nil then
      failures = failures + 1
      T.ok(type(err) == "string", "error message at " .. n)
    end
  end
  T.ok(failures > 0, "some truncations are detected")
end)

T.test("garbage bytes never throw", function()
  math.randomseed(1234)
  local errors = 0
  for _ = 1, 3000 do
    local n = math.random(0, 64)
    local t = {}
    for i = 1, n do t[i] = string.char(math.random(0, 255)) end
    local ok, d, err = pcall(pb.decode_decision, table.concat(t))
    T.ok(ok, "decode threw: " .. tostring(d))
    if not d then
      errors = errors + 1
      T.ok(type(err) == "string", "error is a message")
    end
  end
  T.ok(errors > 100, "garbage is mostly rejected (" .. errors .. ")")
  for _, s in ipairs {"\255\255\255\255\255\255\255\255\255\255\255", "\10\255\255\255\255\15", "\11", "\12",
      "\10\5\8", "\0", "\10\1\10\1\10"} do
    local d, err = pb.decode_decision(s)
    T.eq(d, nil, "rejects " .. W.tohex(s))
    T.ok(err, "with an error")
  end
  T.eq(pb.decode_decision(nil), nil, "nil input")
end)

T.test("deeply nested garbage is bounded", function()
  -- a TargetDecision cannot contain messages, so nesting stops at depth 2
  local s = "x"
  for _ = 1, 50 do s = W.str(1, s) end
  local ok, d = pcall(pb.decode_decision, s)
  T.ok(ok, "no throw")
  T.ok(d == nil or type(d) == "table", "result")
end)

T.test("a decision with more than MAX_TARGETS targets is refused, and soon", function()
  T.eq(pb.MAX_TARGETS, 16, "the cap")
  local one = W.str(1, W.target {target = 1, action = 2, new_value = 60})
  local d = T.ok(pb.decode_decision(string.rep(one, 16) .. W.str(4, "rewrite")))
  T.eq(#d.targets, 16, "16 targets decode")
  local none, err = pb.decode_decision(string.rep(one, 17) .. W.str(4, "rewrite"))
  T.eq(none, nil, "17 do not")
  T.eq(err, "more than 16 targets", "why")
  -- the audit's reply: 1 MiB of empty targets took 617 ms to decode; the cap stops at the 17th
  local clock = require "harp.clock".now
  local reply = string.rep("\10\0", 524280) .. W.str(4, "rewrite")
  collectgarbage() -- the time measured is the decoder's, not a GC cycle's owed by earlier tests
  local t0 = clock()
  none, err = pb.decode_decision(reply)
  local ms = (clock() - t0) * 1000
  T.eq(none, nil, "refused")
  T.eq(err, "more than 16 targets", "why")
  T.ok(ms < 20, string.format("decoding stopped early (%.2f ms)", ms))
end)

T.test("a Decision at every bound decodes: the daemon's longest fields, a newer daemon's extra fields", function()
  local d = T.ok(pb.decode_decision(W.maximal_decision()))
  T.eq(#d.targets, 3, "targets")
  T.eq(#d.targets[1].model_version, 64, "model_version")
  T.eq(#d.targets[3].detail, 512, "detail")
  T.eq(#d.user_message, 512, "user_message")
  T.eq(d.mode, "rewrite", "mode")
  local one = W.str(1, W.target {target = 1, action = 2, new_value = 60} .. string.rep(W.uint(99, 1), 8))
  local bounds = string.rep(one, pb.MAX_TARGETS) .. W.str(2, string.rep("m", 512))
    .. W.str(3, "harp:" .. string.rep("a", 1019)) .. W.str(4, string.rep("o", 16))
    .. string.rep(W.str(98, ""), pb.MAX_EXTRA)
  d = T.ok(pb.decode_decision(bounds))
  T.eq(#d.targets, 16, "every target")
  T.eq(#d.annotation, 1024, "annotation")
end)

T.test("a string past its bound is refused, naming it", function()
  local bounds = {model_version = 64, detail = 512, user_message = 512, annotation = 1024, mode = 16}
  for name, len in pairs(bounds) do
    local at, past = {}, {}
    at[name], past[name] = string.rep("x", len), string.rep("x", len + 1)
    local in_target = name == "model_version" or name == "detail"
    local function decision(t) return W.decision(in_target and {targets = {t}} or t) end
    T.ok(pb.decode_decision(decision(at)), name .. " at its bound")
    local none, err = pb.decode_decision(decision(past))
    T.eq(none, nil, name .. " past its bound")
    T.eq(err, name .. " longer than " .. len .. " bytes", "why")
  end
end)

T.test("a ninth unknown or repeated field in a message is refused", function()
  T.eq(pb.MAX_EXTRA, 8, "the budget")
  local unknown, mode = W.uint(99, 1), W.str(4, "rewrite")
  T.ok(pb.decode_decision(string.rep(unknown, 8) .. mode), "8 unknown")
  T.ok(pb.decode_decision(string.rep(mode, 9)), "8 repeats")
  local why = "more than 8 unknown or repeated fields in a Decision"
  T.eq(select(2, pb.decode_decision(string.rep(unknown, 9) .. mode)), why, "9 unknown")
  T.eq(select(2, pb.decode_decision(string.rep(mode, 10))), why, "9 repeats")
  T.eq(select(2, pb.decode_decision(string.rep(unknown, 4) .. string.rep(mode, 6))), why, "both")
  T.eq(select(2, pb.decode_decision(W.uint(2, 5) .. string.rep(unknown, 8))), why, "a wrong wire type")
  local target = W.str(1, W.uint(1, 1) .. string.rep(W.uint(2, 2), 10))
  T.eq(select(2, pb.decode_decision(target)), "more than 8 unknown or repeated fields in a TargetDecision",
    "in a target")
  local per_message = string.rep(W.str(1, string.rep(unknown, 8)), 3) .. string.rep(unknown, 8)
  T.ok(pb.decode_decision(per_message), "a budget per message")
end)

T.test("a Decision padded to 16 KiB is refused, and soon", function()
  local clock = require "harp.clock".now
  for _, case in ipairs(W.padded_decisions(16384)) do
    local name, bytes = case[1], case[2]
    T.ok(#bytes > 16000 and #bytes <= 16384, name .. ": size " .. #bytes)
    collectgarbage() -- the time measured is the decoder's, not a GC cycle's owed by earlier tests
    local t0, none, err = clock()
    for _ = 1, 20 do none, err = pb.decode_decision(bytes) end
    local ms = (clock() - t0) * 1000 / 20
    T.eq(none, nil, name .. ": refused")
    T.ok(err:find("longer than") or err:find("unknown or repeated"), name .. ": " .. tostring(err))
    -- decoded whole, each took 1.5-2.6 ms; refused at the first field past a bound, ~0.02 ms
    T.ok(ms < 0.5, string.format("%s: refused in %.3f ms", name, ms))
  end
end)

T.test("the Advice's repeated fields are capped far above what the daemon sends", function()
  local opt = W.str(6, W.option {size = 1, expected_minutes = 10, expected_cost = 1})
  local a = T.ok(pb.decode_advice(string.rep(opt, pb.MAX_OPTIONS)))
  T.eq(#a.options, pb.MAX_OPTIONS, "4096 options")
  local none, err = pb.decode_advice(string.rep(opt, pb.MAX_OPTIONS + 1))
  T.eq(none, nil, "one more is refused")
  T.eq(err, "more than 4096 options", "why")
  -- the audit's reply: 1 MiB of empty options (991 ms and 361 MB) stops at the 4097th
  T.eq(select(2, pb.decode_advice(string.rep("\50\0", 524288))), "more than 4096 options", "refused")
  local note = W.str(10, "n")
  T.ok(pb.decode_advice(string.rep(note, pb.MAX_NOTES)), "64 notes")
  T.eq(select(2, pb.decode_advice(string.rep(note, pb.MAX_NOTES + 1))), "more than 64 notes", "65 are not")
  T.eq(select(2, pb.decode_advice(string.rep(W.uint(99, 1), pb.MAX_EXTRA + 1))),
    "more than 8 unknown or repeated fields in a Advice", "unknown fields")
end)

local T = ...
local partitions = require "harp.partitions"

local PARTS = {"debug", "batch", "gpu"}

local function raising()
  return setmetatable({}, {__index = function(_, k) error("no field " .. k) end})
end

T.test("the smallest MaxTime of the job's partitions, none for INFINITE or an unknown one", function()
  local limits = {debug = 30, gpu = 20}
  local m = partitions.max_time
  for _, by_index in ipairs {false, true} do
    local parts = T.part_list(PARTS, "batch", by_index, limits)
    local how = by_index and " (by index)" or " (by name)"
    T.eq(m(parts, "debug"), 30, "one partition" .. how)
    T.eq(m(parts, "batch"), nil, "INFINITE: none" .. how)
    T.eq(m(parts, "batch,debug"), 30, "the smallest of a list" .. how)
    T.eq(m(parts, "debug,gpu"), 20, "the smallest of a list" .. how)
    T.eq(m(parts, "nope"), nil, "not in part_list" .. how)
    T.eq(m(parts, "nope,debug"), 30, "the ones known" .. how)
  end
  local parts = T.part_list(PARTS, "batch", false, {debug = 4294967294})
  T.eq(m(parts, "debug"), nil, "NO_VAL: none")
  parts.debug = raising()
  T.eq(m(parts, "debug"), nil, "a record that raises")
  for what, bad in pairs {["no table"] = "debug", ["nil"] = nil, number = 7} do
    T.eq(m(bad, "debug"), nil, what)
  end
  T.eq(m(T.part_list(PARTS, "batch", false, limits), nil), nil, "no partition")
end)

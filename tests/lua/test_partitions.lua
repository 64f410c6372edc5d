local T = ...
local partitions = require "harp.partitions"

local NO_VAL, INFINITE = 4294967294, 4294967295
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

T.test("the limit of a job without one: DefaultTime, else MaxTime, none for INFINITE", function()
  local d = partitions.default_time
  for _, by_index in ipairs {false, true} do
    local how = by_index and " (by index)" or " (by name)"
    -- debug: DefaultTime 30, MaxTime 60; gpu: no DefaultTime, MaxTime 120; batch: neither (INFINITE)
    local parts = T.part_list(PARTS, "batch", by_index, {debug = 60, gpu = 120}, {debug = 30})
    T.eq(d(parts, "debug"), 30, "DefaultTime" .. how)
    T.eq(d(parts, "gpu"), 120, "no DefaultTime (NO_VAL): MaxTime" .. how)
    T.eq(d(parts, "batch"), nil, "neither: no limit" .. how)
    T.eq(d(parts, "nope"), nil, "not in part_list" .. how)
  end
  local parts = T.part_list(PARTS, "batch", false, {debug = 60}, {debug = INFINITE})
  T.eq(d(parts, "debug"), nil, "DefaultTime=UNLIMITED: Slurm gives no limit, not MaxTime")
  parts = T.part_list(PARTS, "batch", false, {debug = 60}, {debug = 0})
  T.eq(d(parts, "debug"), nil, "DefaultTime 0 (Slurm refuses a job without a limit there)")
  parts = T.part_list(PARTS, "batch", false, {debug = NO_VAL}, {debug = NO_VAL})
  T.eq(d(parts, "debug"), nil, "both NO_VAL")
  parts = {debug = setmetatable({}, {__index = function(_, k) return ({max_time = 45})[k] end})}
  T.eq(d(parts, "debug"), nil, "no default_time field: unknown, not MaxTime")
  for what, bad in pairs {fraction = 1.5, negative = -5, text = "30", ["not a number"] = 0 / 0} do
    parts = T.part_list(PARTS, "batch", false, {debug = 60}, {debug = bad})
    local want = what == "text" and 30 or nil -- a numeric string is read as its number, as tonumber does
    T.eq(d(parts, "debug"), want, what)
  end
end)

T.test("a job for several partitions gets the smallest of their defaults", function()
  -- Slurm picks the partition when it starts the job: the smallest is exact when they agree and never
  -- above any of them; the partitions with no limit or unknown to part_list do not count.
  local d = partitions.default_time
  local parts = T.part_list({"a", "b", "c", "open"}, "a", false, {a = 600, b = 90, c = 240}, {a = 60})
  T.eq(d(parts, "a,b"), 60, "a's DefaultTime below b's MaxTime")
  T.eq(d(parts, "b,c"), 90, "MaxTimes, the smallest")
  T.eq(d(parts, "c,a"), 60, "order does not matter")
  T.eq(d(parts, "open,c"), 240, "a partition without limit does not count")
  T.eq(d(parts, "open"), nil, "only unlimited ones: none")
  T.eq(d(parts, "nope,b"), 90, "the ones known")
  T.eq(d(parts, "a,,b,"), 60, "empty names are skipped")
end)

T.test("a part_list or record that raises, or is no table: no default, no error", function()
  local d = partitions.default_time
  local parts = T.part_list(PARTS, "batch", false, {gpu = 120}, {debug = 30})
  parts.debug = raising()
  T.eq(d(parts, "debug"), nil, "a record that raises")
  T.eq(d(parts, "debug,gpu"), 120, "the others still count")
  -- default_time raises but max_time answers: unknown, not unset (no MaxTime in its place)
  parts.debug = setmetatable({}, {__index = function(_, k)
    if k == "default_time" then error("boom") end
    return ({max_time = 45})[k]
  end})
  T.eq(d(parts, "debug"), nil, "a raising default_time: unknown, not MaxTime")
  T.eq(d(parts, "debug,gpu"), 120, "the others still count")
  local bad_lists = {["no table"] = "debug", number = 7, ["a function"] = print, ["a userdata"] = newproxy(true)}
  for what, bad in pairs(bad_lists) do
    T.eq(d(bad, "debug"), nil, what)
  end
  T.eq(d(nil, "debug"), nil, "nil part_list")
  T.eq(d(T.part_list(PARTS, "batch", false, {}, {debug = 30}), nil), nil, "no partition")
  T.eq(d(T.part_list(PARTS, "batch", false, {}, {debug = 30}), 7), nil, "a partition that is no string")
end)

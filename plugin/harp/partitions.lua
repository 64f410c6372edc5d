-- What slurm_job_submit's part_list (slurmctld 22.05) says of a job's partitions: the default
-- partition, and the time limits Slurm holds the job to, MaxTime and the limit it gives a job
-- submitted without one. Every read is under pcall (the records read their fields in C and may
-- raise): a failed read is "not known", never an error. part_list is only read.

local floor, type, tonumber, pcall, pairs, ipairs = math.floor, type, tonumber, pcall, pairs, ipairs
local gmatch = string.gmatch

local M = {}

local NO_VAL = 4294967294 -- slurm.NO_VAL: not set; INFINITE = NO_VAL + 1: no limit

-- A limit in minutes: a whole number from `least` up, below NO_VAL; anything else (a sentinel, no
-- number) is none.
local function minutes(v, least)
  v = tonumber(v)
  if v == nil or v ~= v or v < least or v >= NO_VAL or floor(v) ~= v then return nil end
  return v
end

-- t[k] under pcall: nil on any error.
local function index(t, k)
  return t[k]
end
local function field(t, k)
  local ok, v = pcall(index, t, k)
  if ok then return v end
  return nil
end

local function name(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

-- Name of the default partition in part_list, as Slurm has it (harp.request cuts it as it cuts any
-- text), or nil. 22.05 keys part_list by partition name (records are empty tables whose __index reads
-- the partition, flag_default is the number 1 or 0); older releases number it: the record's `name`
-- is read first, a string key is the fallback. Any error or no partition flagged default means nil.
function M.default_partition(part_list)
  if type(part_list) ~= "table" then return nil end
  local ok, found = pcall(function()
    for key, rec in pairs(part_list) do
      local flag = field(rec, "flag_default")
      if flag == 1 or flag == true then
        local n = name(field(rec, "name")) or name(key)
        if n then return n end
      end
    end
    return nil
  end)
  if ok then return found end
  return nil
end

-- The partition record `partition` in part_list: 22.05 keys it by name; older releases number it.
local function record(part_list, partition)
  local rec = field(part_list, partition)
  if rec ~= nil then return rec end
  for _, r in ipairs(part_list) do
    if field(r, "name") == partition then return r end
  end
  return nil
end

-- The smallest of `limit(record)` over the job's partitions (`names`: the request's, comma-separated),
-- or nil: none of them has one, none is in part_list, or a read fails.
local function smallest(part_list, names, limit)
  if type(part_list) ~= "table" or type(names) ~= "string" then return nil end
  local ok, least = pcall(function()
    local found
    for partition in gmatch(names, "[^,]+") do
      local rec = record(part_list, partition)
      local value = rec ~= nil and limit(rec) or nil
      if value and (not found or value < found) then found = value end
    end
    return found
  end)
  if ok then return least end
  return nil
end

local function max_time(rec)
  return minutes(field(rec, "max_time"), 0)
end

-- The smallest MaxTime in minutes of the job's partitions, or nil (INFINITE in every one, none known).
-- Slurm checks the limit a plugin leaves against it: a job asking more than MaxTime waits
-- (PartitionTimeLimit) or is refused, and harp must not cut it into one that runs, in a partition
-- that stops it there.
function M.max_time(part_list, names)
  return smallest(part_list, names, max_time)
end

-- The limit slurmctld gives a job without one when it starts it in the partition (select_nodes):
-- DefaultTime when set, else (NO_VAL) MaxTime; nil when that is INFINITE (no limit) or 0 (Slurm
-- refuses a job without a limit in a partition whose DefaultTime is 0). A default_time that is not
-- there or cannot be read is unknown, not unset: MaxTime does not stand in for it.
local function default_time(rec)
  local given = tonumber(field(rec, "default_time"))
  if given == NO_VAL then return minutes(field(rec, "max_time"), 1) end
  return minutes(given, 1)
end

-- The limit in minutes a job submitted without one runs under, as accounting will record it, or nil
-- (no limit, or none known). For a list (`-p a,b`) Slurm picks the partition when it starts the job,
-- after submission: the smallest of their limits, as for MaxTime. It is exact when they agree (a
-- site's usual DefaultTime), and otherwise the limit of one partition the job may run in, never
-- above any of them (a weight on the saving of a cut is never overstated: core.safety_rule).
function M.default_time(part_list, names)
  return smallest(part_list, names, default_time)
end

return M

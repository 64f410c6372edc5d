-- The one line sbatch prints from the daemon's Advice (pb.decode_advice) for the job being submitted
-- (sbatch_request.build), or nil when there is nothing to say: no evidence at the size asked for, or
-- no option that beats it by MARGIN.
--
-- "Asked" is the priced option at the job's size (CPUs, or GPUs × nodes for a GPU job) in the job's
-- partition; a job without -p is compared with the cheapest partition at its size (Slurm's default
-- partition is not known here: the line then never overstates the gain). An option is named when it
-- is cheaper by MARGIN, and strictly cheaper (the cheapest such), else when it costs no more and is
-- faster by MARGIN (the fastest such). Only options the evidence says finish (p_unfinished = 0) count.

local log = require "harp.log"

local format, sub, max = string.format, string.sub, math.max
local ipairs, type = ipairs, type

local M = {MARGIN = 0.10}

local SAME = 1e-9 -- relative: costs this close are equal (the daemon's ties, 9 significant digits)
local HINT = "harp advise for more"

local function usable(o)
  return type(o) == "table" and o.priced == true and o.p_unfinished == 0
    and o.expected_cost >= 0 and o.expected_cost < 1 / 0
    and o.expected_minutes > 0 and o.expected_minutes < 1 / 0
end

-- The job's size in the advice's unit, from the request we sent.
local function asked_size(unit, req)
  if unit == "GPU" then
    local g = req.gpus_per_node
    return g and g * max(req.min_nodes or 1, 1)
  end
  return req.min_cpus or 1 -- no -n, no -c: one task of one CPU
end

-- The option standing for what the job asks; the cheapest when the partition is not known.
local function asked_option(options, size, partition)
  local found
  for _, o in ipairs(options) do
    if usable(o) and o.size == size and (partition == nil or o.partition == partition) then
      if not found or o.expected_cost < found.expected_cost then found = o end
    end
  end
  return found
end

local function better_option(options, asked)
  local cheaper, faster
  local cost_bar = asked.expected_cost * (1 - M.MARGIN)
  local time_bar = asked.expected_minutes * (1 - M.MARGIN)
  local no_more = asked.expected_cost * (1 + SAME)
  for _, o in ipairs(options) do
    if usable(o) and o ~= asked then
      -- Strictly cheaper: at a cost of 0 (a free partition, billing.price = 0) the bar is 0 too, and
      -- an option that also costs 0 is no cheaper, however much slower.
      if o.expected_cost < asked.expected_cost and o.expected_cost <= cost_bar
        and (not cheaper or o.expected_cost < cheaper.expected_cost) then
        cheaper = o
      end
      if o.expected_cost <= no_more and o.expected_minutes <= time_bar
        and (not faster or o.expected_minutes < faster.expected_minutes) then
        faster = o
      end
    end
  end
  return cheaper or faster
end

local function number(v)
  if v >= 10 then return format("%.0f", v) end
  return format("%.2g", v)
end
M.number = number

function M.duration(minutes)
  if minutes < 1 then return format("%.0f s", max(minutes * 60, 1)) end
  if minutes < 100 then return number(minutes) .. " min" end
  return format("%.1f h", minutes / 60)
end

local function amount(n, unit)
  return format("%d %s%s", n, unit, n == 1 and "" or "s")
end

-- Text from the daemon, shown on a terminal: no control characters, bounded.
local function clean(s, limit)
  return log.escape(sub(s, 1, limit))
end

function M.line(advice, req)
  if type(advice) ~= "table" or type(advice.options) ~= "table" or type(req) ~= "table" then return nil end
  local unit = advice.unit == "GPU" and "GPU" or "CPU"
  local size = asked_size(unit, req)
  if not size then return nil end
  local asked = asked_option(advice.options, size, req.partition)
  if not asked then return nil end
  local best = better_option(advice.options, asked)
  if not best then return nil end
  local currency = advice.currency ~= "" and (" " .. clean(advice.currency, 16)) or ""
  return format("harp: %s in %s would take ~%s and cost ~%s%s (you asked %s: ~%s, ~%s%s); %s",
    amount(best.size, unit), clean(best.partition, 64), M.duration(best.expected_minutes),
    number(best.expected_cost), currency, amount(size, unit), M.duration(asked.expected_minutes),
    number(asked.expected_cost), currency, HINT)
end

return M

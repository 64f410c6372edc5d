-- The one line a user reads in sbatch's output when harp changed their job. The daemon writes it for
-- its decision; where the job got something else (a time cut not made above the partition's MaxTime,
-- CPUs kept or rounded per task, memory rounded per CPU), that line would announce a change not made,
-- so it is written here from what was applied.

local floor, type, select = math.floor, type, select
local find, gsub, match, sub, format = string.find, string.gsub, string.match, string.sub, string.format
local concat = table.concat

local M = {}
M.MAX_MESSAGE = 512

-- The daemon's line as one line of at most MAX_MESSAGE bytes, or nil (none, or blank).
function M.clean(msg)
  if type(msg) ~= "string" then return nil end
  msg = gsub(sub(msg, 1, M.MAX_MESSAGE), "%c", " ")
  if find(msg, "^%s*$") then return nil end
  return msg
end

-- Whole minutes in Slurm's own [D-]HH:MM:SS, as the daemon writes them.
local function clock(minutes)
  local days, rest = floor(minutes / 1440), minutes % 1440
  local hms = format("%02d:%02d:00", floor(rest / 60), rest % 60)
  if days > 0 then return format("%.0f-%s", days, hms) end
  return hms
end

-- MB as the daemon writes them: whole, or a per-node average of a job on several nodes with its
-- decimals (to the hundredth).
local function mb(x)
  if x == floor(x) then return format("%.0f", x) end
  return (gsub(format("%.2f", x), "0$", ""))
end

-- The line for what `applied` holds, each part nil when not done:
--   time     {from, to}: the time limit lowered, in minutes
--   time_min minutes: time_min set
--   memory   {from, to, per_cpu, node_from, node_to}: MB per node lowered, or MB per CPU (per_cpu)
--            with MB per node as the daemon counts it beside: said whenever that is below the
--            user's, as a CPU cut makes it with the MB per CPU kept
--   cpus     {from, to}: CPUs lowered
--   kept     {at, why}: CPUs kept at `at` against a decision below them, `why` (": ...", " (...)" or nil)
--   extended minutes: harp guard extends the job up to this limit, its user's own (extend, time_min)
-- `daemon`: the daemon's cleaned line, whose closing parenthesis, what the values rest on
-- ("(90% of similar past jobs finished within it)"), is kept; where it gives each target's cut its
-- own (a calibrated time cut beside a quantile's memory cut), each part keeps its target's. nil when
-- nothing was done.
function M.written(applied, daemon)
  local basis = daemon and match(daemon, "( %([^()]*%))%.?%s*$") or ""
  local each = daemon and select(2, gsub(daemon, "%(", "")) > 1
  local function why(word)  -- the daemon's reason for its cut of `word`, where it gives each its own
    local own = each and match(daemon, word .. " from [^,()]* (%([^()]*%))")
    return own and " " .. own or ""
  end
  local lowered, parts = {}, {}
  local t, m, c = applied.time, applied.memory, applied.cpus
  if t then lowered[#lowered + 1] = format("time from %s to %s", clock(t[1]), clock(t[2])) .. why("time") end
  if m and not m[3] and m[2] < m[1] then
    lowered[#lowered + 1] = format("memory from %.0f MB to %.0f MB", m[1], m[2]) .. why("memory")
  elseif m and m[3] and m[5] < m[4] then
    local per_node = format("from %s MB to %s MB per node", mb(m[4]), mb(m[5]))
    if m[2] < m[1] then per_node = format("from %.0f MB to %.0f MB per CPU and ", m[1], m[2]) .. per_node end
    lowered[#lowered + 1] = "memory " .. per_node .. why("memory")
  end
  if c then lowered[#lowered + 1] = format("CPUs from %.0f to %.0f", c[1], c[2]) .. why("cpus") end
  if #lowered > 0 then parts[1] = "lowered " .. concat(lowered, ", ") .. (each and "" or basis) end
  if applied.time_min then parts[#parts + 1] = "time_min set to " .. clock(applied.time_min) .. basis end
  if #parts == 0 then return nil end
  local kept = applied.kept
  if kept then parts[#parts + 1] = format("CPUs kept at %.0f%s", kept[1], kept[2] or "") end
  if applied.extended then
    parts[#parts + 1] = "it is extended up to " .. clock(applied.extended) .. " while the job runs if it needs it"
  end
  return sub("harp: " .. concat(parts, "; ") .. ".", 1, M.MAX_MESSAGE)
end

return M

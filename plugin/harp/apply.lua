-- Turn a Decision into a plan of job_desc changes (pure), then commit it (all or nothing).
-- Rules: a rewrite only ever LOWERS a value the user gave; annotations are appended to admin_comment
-- as one space-separated "harp:..." token, its flagged items saying what was applied; users
-- (uid ~= 0) cannot bring their own harp tokens.
-- Modes: "rewrite" lowers any target; "extend" lowers the time limit only (harp guard extends it
-- again up to the user's own limit); "time_min" sets time_min only, when the user gave none.

local floor, ceil, max = math.floor, math.ceil, math.max
local type, ipairs, pcall, tostring = type, ipairs, pcall, tostring
local find, gsub, gmatch, sub, format = string.find, string.gsub, string.gmatch, string.sub, string.format
local concat = table.concat

local request = require "harp.request"
local count16, count32, count64, absent32 = request.count16, request.count32, request.count64, request.absent32

local M = {}
M.MAX_MESSAGE = 512
M.MAX_ANNOTATION = 512

local TIME, MEMORY, CPUS = 1, 2, 3
local REWRITE, SET_TIME_MIN = 2, 3
-- The actions each mode may carry out, per target.
local ALLOWED = {
  rewrite = {[REWRITE] = {[TIME] = true, [MEMORY] = true, [CPUS] = true}},
  extend = {[REWRITE] = {[TIME] = true}},
  time_min = {[SET_TIME_MIN] = {[TIME] = true}},
}
-- The modes whose time cut harp guard extends again, by the job's tag.
local GUARDED = {extend = true, time_min = true}
M.OPT_OUT = "harp:off"

local function is_harp_token(tok)
  return sub(tok, 1, 5) == "harp:" or sub(tok, 1, 5) == "harp="
end

-- Whether the user opted this job out with a "harp:off" token in --comment (tokens split on
-- whitespace). Found by a plain search, not by splitting the comment: slurmctld checks a comment's
-- length only after job_submit, and splitting a 4 MiB one took 124 ms inside its locks. Looked for
-- in the first MAX_COMMENT bytes only.
M.MAX_COMMENT = 65536
local OPT_OUT_END = #M.OPT_OUT
function M.opted_out(comment)
  if type(comment) ~= "string" then return false end
  if #comment > M.MAX_COMMENT then comment = sub(comment, 1, M.MAX_COMMENT) end
  local at = find(comment, M.OPT_OUT, 1, true)
  while at do
    if (at == 1 or find(comment, "^%s", at - 1)) and (at + OPT_OUT_END > #comment
        or find(comment, "^%s", at + OPT_OUT_END)) then
      return true
    end
    at = find(comment, M.OPT_OUT, at + 1, true)
  end
  return false
end

-- admin_comment without harp tokens, or nil when there is nothing to strip.
function M.strip_forged(comment, submit_uid)
  if submit_uid == 0 or type(comment) ~= "string" then return nil end
  if not find(comment, "harp[:=]") then return nil end
  local kept, n, dropped = {}, 0, false
  for tok in gmatch(comment, "%S+") do
    if is_harp_token(tok) then dropped = true else n = n + 1; kept[n] = tok end
  end
  if not dropped then return nil end
  return concat(kept, " ")
end

local function clean_message(msg)
  if type(msg) ~= "string" then return nil end
  msg = gsub(sub(msg, 1, M.MAX_MESSAGE), "%c", " ")
  if find(msg, "^%s*$") then return nil end
  return msg
end

-- A tag of the decision's own mode ("harp:<mode>,..."): the guard extends only jobs of its modes.
local function valid_annotation(a, mode)
  return type(a) == "string" and #a <= M.MAX_ANNOTATION and type(mode) == "string"
    and sub(a, 1, 6 + #mode) == "harp:" .. mode .. "," and not find(a, "[%s%c]")
end

-- Whether the tag flags a target the decision does not change (a daemon's slip, never applied).
local function unflagged(ann, by_target)
  return (not by_target[TIME] and find(ann, ",t[!~]=") or not by_target[MEMORY] and find(ann, ",m[!~]=")
    or not by_target[CPUS] and find(ann, ",c[!~]=")) and true or false
end

-- The tag with t0, the limit harp guard extends the job up to, the job's own as submitted (`limit`,
-- nil: none), whatever the daemon wrote: a wrong one would let the guard raise the job past the
-- user's request.
function M.own_limit(ann, limit)
  if not find(ann, ",t0=", 1, true) then return ann end
  return (gsub(ann, ",t0=%d*", limit and format(",t0=%d", limit) or ""))
end

-- Whether the job got another value than the decision `t` (nil: no decision) for its target; `got` is
-- nil when the plugin changed nothing. A plain function, not a closure: no allocation per submission.
local function differs(t, got)
  return t ~= nil and t.new_value ~= got
end

-- The daemon's tag with each flagged item ("c!=3", "t~=60") saying what the job got: its value is
-- the one applied (time, memory in MB per node, cpus), or, where nothing was changed, its flag is
-- dropped and the daemon's value kept as a prediction. got_t, got_m, got_c: a number or nil. Too
-- long for MAX_ANNOTATION (a value with more digits), the items whose value changed are left out:
-- an item missing is no claim, a wrong one is.
function M.applied_tag(ann, got_t, got_m, got_c)
  local got = {t = got_t, m = got_m, c = got_c}
  local function item(drop)
    -- suffix: the item's "/q0.9" or "/k", kept with it and left out with it
    return function(key, flag, value, suffix)
      local v = got[key]
      if v == nil then return "," .. key .. "=" .. value .. suffix end
      local applied = format("%.0f", v)
      if applied == value then return nil end
      if drop then return "" end
      return "," .. key .. flag .. "=" .. applied .. suffix
    end
  end
  local pattern = ",([tmc])([!~])=(%d+)([^,]*)"
  local out = gsub(ann, pattern, item(false))
  if #out > M.MAX_ANNOTATION then out = gsub(ann, pattern, item(true)) end
  return out
end

-- plan = {changes = {{field, old, new}, ...}, notes = {...}, rewrote = bool, message = string|nil}
-- max_time: the smallest MaxTime in minutes of the job's partitions (harp.partitions.max_time), or nil.
function M.plan(job_desc, decision, submit_uid, max_time)
  local function get(k) return job_desc[k] end
  local plan = {changes = {}, notes = {}, rewrote = false}
  local function set(field, old, new) plan.changes[#plan.changes + 1] = {field, old, new} end
  local function note(s) plan.notes[#plan.notes + 1] = s end

  -- first decision per target only; an action counts only where its mode allows it (ALLOWED);
  -- one note per action ignored, however many targets carry it
  local by_target, asked, ignored = {}, false, nil
  local allowed = ALLOWED[decision.mode] or {}
  for _, t in ipairs(type(decision.targets) == "table" and decision.targets or {}) do
    local changes = type(t) == "table" and (t.action == REWRITE or t.action == SET_TIME_MIN)
    if changes and by_target[t.target] == nil then
      if allowed[t.action] and allowed[t.action][t.target] then
        by_target[t.target] = t
        asked = true
      elseif not (ignored and ignored[t.action]) then
        ignored = ignored or {}
        ignored[t.action] = true
        note("ignored action " .. tostring(t.action) .. " in mode " .. tostring(decision.mode))
      end
    end
  end

  -- What the job got per target in the tag's units (nil: left as asked), for the tag.
  local got_t, got_m

  -- CPUs: the cut the decision asks for, as cpus_per_task x tasks; made below with memory, since a
  -- --mem-per-cpu job may have to keep more CPUs than that.
  local cpus = by_target[CPUS] and count64(by_target[CPUS].new_value, 1)
  local cut -- {cpt, tasks, min_cpus, min_raw, new_cpt, before}: a CPU cut to make, before is the count now
  -- The job's CPU count before and after the plan, and why the latter is not the decision's count:
  -- for the user's message, which the daemon wrote for the decision.
  local cpus_now, kept_cpus, why = count32(get("min_cpus"), 1), nil, nil
  if cpus then
    local cpt = count16(get("cpus_per_task"), 1)
    local min_raw = get("min_cpus")
    local min_cpus = count32(min_raw, 1)
    if not cpt then
      note("cpus: no --cpus-per-task, left alone")
    elseif not min_cpus and not absent32(min_raw) then
      note("cpus: min_cpus is not a count, left alone")
    else
      local tasks = count32(get("num_tasks"), 1) or (min_cpus and floor(min_cpus / cpt)) or 1
      if tasks < 1 then tasks = 1 end
      -- round up: splitting the CPUs over the tasks must not give the job fewer than predicted
      local new_cpt = ceil(cpus / tasks)
      cpus_now = max(min_cpus or 0, cpt * tasks)
      if new_cpt >= 1 and new_cpt < cpt then
        cut = {cpt = cpt, tasks = tasks, min_cpus = min_cpus, min_raw = min_raw, new_cpt = new_cpt, before = cpus_now}
      else
        why = format(" (%d tasks x %d CPUs)", tasks, cpt)
      end
    end
  end
  local function cut_cpus(new_cpt)
    local total = new_cpt * cut.tasks
    set("cpus_per_task", get("cpus_per_task"), new_cpt)
    if not cut.min_cpus or total < cut.min_cpus then set("min_cpus", cut.min_raw, total) end
    note(format("cpus_per_task %d->%d", cut.cpt, new_cpt))
    why = format(" (%d tasks x %d CPUs)", cut.tasks, new_cpt)
    return total
  end

  local per_node = count64(get("min_mem_per_node"), 1)
  local per_cpu = not per_node and count64(get("min_mem_per_cpu"), 1)
  local mem = by_target[MEMORY] and count64(by_target[MEMORY].new_value, 1)
  local nodes = count32(get("min_nodes"), 1) or 1
  if cut and per_cpu then
    -- Slurm gives --mem-per-cpu x CPUs: fewer CPUs keep the job's memory only with more MB per CPU,
    -- and above MaxMemPerCPU (the partition's, else slurm.conf's, which a plugin cannot read) Slurm
    -- turns that into more CPUs per task than the user asked for. So the CPUs are cut only with a
    -- memory decision that leaves the per-CPU value at most the user's own.
    local lowered = mem and ceil(mem * nodes / (cut.new_cpt * cut.tasks))
    if lowered and lowered <= per_cpu then
      kept_cpus = cut_cpus(cut.new_cpt)
      set("min_mem_per_cpu", get("min_mem_per_cpu"), lowered)
      got_m = floor(lowered * kept_cpus / nodes)
      note(format("mem_per_cpu %d->%d MB (%d MB on %d CPUs)", per_cpu, lowered, lowered * kept_cpus, kept_cpus))
      mem = nil
    else
      note(format("cpus: kept at %d: fewer would need more than the %d MB of --mem-per-cpu asked", cut.before,
        per_cpu))
      why = format(": fewer would need more than the %d MB per CPU asked", per_cpu)
    end
    cut = nil
  end
  if cut then kept_cpus = cut_cpus(cut.new_cpt) end
  if mem and per_node then
    if mem < per_node then
      set("min_mem_per_node", get("min_mem_per_node"), mem)
      got_m = mem
      note(format("mem_per_node %d->%d MB", per_node, mem))
    end
  elseif mem and per_cpu then
    -- MB per node -> MB per CPU (no CPU cut here: the CPU count is the job's own)
    local ncpus = count32(get("min_cpus"), 1) or 1
    local new = ceil(mem * nodes / ncpus)
    if new >= 1 and new < per_cpu then
      set("min_mem_per_cpu", get("min_mem_per_cpu"), new)
      -- MB per node as the daemon counts it (per CPU x CPUs / nodes), not above what it got
      got_m = floor(new * ncpus / nodes)
      note(format("mem_per_cpu %d->%d MB", per_cpu, new))
    end
  elseif mem then
    note("memory: not requested, left alone")
  end

  local minutes = by_target[TIME] and count64(by_target[TIME].new_value, 1)
  local limit = count32(get("time_limit"), 1)
  if minutes and limit and max_time and limit > max_time then
    -- Slurm holds or refuses such a job as asked; cut, it would run, and stop at MaxTime.
    note(format("time: left alone: %d min asked, above the partition's MaxTime of %d min", limit, max_time))
    minutes = nil
  end
  if minutes and by_target[TIME].action == SET_TIME_MIN then
    local tmin_raw = get("time_min")
    local tmin = count32(tmin_raw, 1)
    if tmin then
      note("time_min: the user's own, left alone")
    elseif not absent32(tmin_raw) then
      note("time_min: not a count, left alone")
    elseif limit and minutes < limit then
      set("time_min", tmin_raw, minutes)
      got_t = minutes
      note(format("time_min ->%d min (limit %d)", minutes, limit))
    else
      note("time_min: not below the limit, left alone")
    end
  elseif minutes then
    if limit and minutes < limit then
      set("time_limit", get("time_limit"), minutes)
      got_t = minutes
      local tmin_raw = get("time_min")
      local tmin = count32(tmin_raw, 1)
      if tmin and tmin > minutes then set("time_min", tmin_raw, minutes) end
      note(format("time_limit %d->%d min", limit, minutes))
    elseif not limit then
      note("time: not requested, left alone")
    end
  end

  local comment = get("admin_comment")
  local base = M.strip_forged(comment, submit_uid)
  if base then note("stripped user-supplied harp tokens") end
  base = base or comment
  local ann = decision.annotation
  if ann ~= nil and ann ~= "" and not valid_annotation(ann, decision.mode) then
    note("ignored malformed annotation")
    ann = nil
  end
  if ann == "" then ann = nil end
  ann = ann and M.own_limit(ann, limit)
  -- The tag records what the job got: readers take a flagged value for the limit harp set. Rebuilt
  -- only when something differs from the decision (CPUs rounded per task or kept for --mem-per-cpu,
  -- memory rounded per CPU, an action not carried out, a flag on a target it did not decide).
  if ann and (ignored or differs(by_target[TIME], got_t) or differs(by_target[MEMORY], got_m)
      or differs(by_target[CPUS], kept_cpus) or unflagged(ann, by_target)) then
    local fixed = M.applied_tag(ann, got_t, got_m, kept_cpus)
    if fixed ~= ann then note("tag: as applied"); ann = fixed end
  end
  -- harp guard extends a job only by its tag: in its modes, a limit cut that the tag does not flag,
  -- with the user's own limit beside it, would stand until Slurm kills the job there.
  if got_t and GUARDED[decision.mode] and not (ann and find(ann, ",t[!~]=") and find(ann, ",t0=", 1, true)) then
    local kept = {}
    for _, c in ipairs(plan.changes) do
      if c[1] ~= "time_limit" and c[1] ~= "time_min" then kept[#kept + 1] = c end
    end
    plan.changes = kept
    note("time: left alone: no tag harp guard could extend the job by")
    if ann then ann = M.applied_tag(ann, nil, got_m, kept_cpus) end
  end
  plan.rewrote = #plan.changes > 0
  if ann then
    if type(base) == "string" and find(base, "%S") then base = base .. " " .. ann else base = ann end
  end
  if base ~= comment then set("admin_comment", comment, base) end

  -- a message that announces rewrites none of which happened would mislead the user
  local msg = clean_message(decision.user_message)
  if msg and (plan.rewrote or not asked) then
    -- the daemon's message gives the decision's CPU count: say what the job got instead
    local applied = kept_cpus or cpus_now
    if cpus and cpus_now and cpus < cpus_now and applied ~= cpus then
      local fix = format(applied < cpus_now and " harp: CPUs set to %d, not %d%s." or " harp: CPUs kept at %d%.0s%s.",
        applied, cpus, why or "")
      msg = sub(msg, 1, M.MAX_MESSAGE - #fix) .. fix
    end
    plan.message = msg
  end
  return plan
end

-- Apply plan.changes in order; on any error restore what was already written. Returns ok, err.
function M.commit(job_desc, plan)
  local done = 0
  for i, c in ipairs(plan.changes) do
    local ok, err = pcall(function() job_desc[c[1]] = c[3] end)
    if not ok then
      for j = done, 1, -1 do
        local r = plan.changes[j]
        -- slurmctld's setters take strings, not nil; "" is how a string field is cleared
        local old = r[2]
        if old == nil then old = "" end
        pcall(function() job_desc[r[1]] = old end)
      end
      return false, "setting " .. tostring(c[1]) .. ": " .. tostring(err)
    end
    done = i
  end
  return true
end

return M

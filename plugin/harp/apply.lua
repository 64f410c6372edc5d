-- Turn a Decision into a plan of job_desc changes (pure), then commit it (all or nothing).
-- Rules: a rewrite only ever LOWERS a value the user gave (CPUs and memory: harp.allocation);
-- annotations are appended to admin_comment as one space-separated "harp:..." token, its flagged
-- items saying what was applied; users (uid ~= 0) cannot bring their own harp tokens (harp.tag).
-- Modes: "rewrite" lowers any target; "extend" lowers the time limit only (harp guard extends it
-- again up to the user's own limit); "time_min" sets time_min only, when the user gave none.

local ipairs, type, pcall, tostring, tonumber = ipairs, type, pcall, tostring, tonumber
local format = string.format

local request = require "harp.request"
local allocation = require "harp.allocation"
local notice = require "harp.notice"
local tag = require "harp.tag"
local read_tag = require "harp.tag_parse".read
local count32, count64, absent32 = request.count32, request.count64, request.absent32

local M = {}

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

-- Whether the job got another value than the decision `t` (nil: no decision) for its target; `got` is
-- nil when the plugin changed nothing (a decision without a value included: its tag's flag claims a
-- change). A plain function, not a closure: no allocation per submission.
local function differs(t, got)
  return t ~= nil and (got == nil or t.new_value ~= got)
end

-- Whether harp guard reads the tag `ann` as the time change applied: `flag` ("!" a limit cut, "~" a
-- time_min set) and `minutes`, with t0 the job's own limit, `own`. Its grammar is core/tag.py's
-- (harp.tag_parse).
local function reads_as(ann, flag, minutes, own)
  local ok, t_flag, t, t0 = read_tag(ann)
  return ok and t_flag == flag and tonumber(t) == minutes and tonumber(t0) == own or false
end

-- plan = {changes = {{field, old, new}, ...}, notes = {...}, rewrote = bool, fault = bool,
--         message = string|nil}; fault: a note says the decision was not carried out as sent (an
-- action its mode does not carry out, a malformed tag, a time cut left for want of a tag the guard reads).
-- max_time: the smallest MaxTime in minutes of the job's partitions (harp.partitions.max_time), or nil.
function M.plan(job_desc, decision, submit_uid, max_time)
  local function get(k) return job_desc[k] end
  local plan = {changes = {}, notes = {}, rewrote = false, fault = false}
  local function set(field, old, new) plan.changes[#plan.changes + 1] = {field, old, new} end
  local function note(s) plan.notes[#plan.notes + 1] = s end
  local function fault(s) note(s); plan.fault = true end

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
        -- the daemon sends a whole number of at least 1 with every such action
        if not count64(t.new_value, 1) then
          fault(format("action %d on target %d: no value to apply (%s), left alone", t.action, t.target,
            tostring(t.new_value)))
        end
      elseif not (ignored and ignored[t.action]) then
        ignored = ignored or {}
        ignored[t.action] = true
        fault("ignored action " .. tostring(t.action) .. " in mode " .. tostring(decision.mode))
      end
    end
  end

  -- What the job got per target in the tag's units (nil: left as asked), for the tag; what was
  -- lowered or set, for the user's line. got_flag: the time item's flag for what was applied.
  local got_t, got_flag, time_note
  local cpus = by_target[CPUS] and count64(by_target[CPUS].new_value, 1)
  local mem = by_target[MEMORY] and count64(by_target[MEMORY].new_value, 1)
  local res = allocation.plan(get, set, note, cpus, mem)
  local got_m, kept_cpus, cpus_now = res.got_m, res.kept_cpus, res.cpus_now
  local applied = {memory = res.memory, cpus = kept_cpus and {cpus_now, kept_cpus}}

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
      got_t, got_flag, applied.time_min = minutes, "~", minutes
      time_note = format("time_min ->%d min (limit %d)", minutes, limit)
    else
      note("time_min: not below the limit, left alone")
    end
  elseif minutes then
    if limit and minutes < limit then
      set("time_limit", get("time_limit"), minutes)
      got_t, got_flag, applied.time = minutes, "!", {limit, minutes}
      local tmin_raw = get("time_min")
      local tmin = count32(tmin_raw, 1)
      if tmin and tmin > minutes then set("time_min", tmin_raw, minutes) end
      time_note = format("time_limit %d->%d min", limit, minutes)
    elseif not limit then
      note("time: not requested, left alone")
    end
  end

  local comment = get("admin_comment")
  local base, stripped = tag.strip_forged(comment, submit_uid)
  if base then note(stripped) end
  base = base or comment
  local ann = decision.annotation
  if ann ~= nil and ann ~= "" and not tag.valid(ann, decision.mode) then
    fault("ignored malformed annotation")
    ann = nil
  end
  if ann == "" then ann = nil end
  ann = ann and tag.own_limit(ann, limit)
  local time_read = got_t and ann and reads_as(ann, got_flag, got_t, limit)
  -- The tag records what the job got: readers take a flagged value for the limit harp set. Rebuilt
  -- only when something differs from the decision (CPUs rounded per task or kept for --mem-per-cpu,
  -- memory rounded per CPU, an action not carried out, a flag on a target it did not decide) or its
  -- time item, as the guard reads it, is not the time change applied.
  if ann and (ignored or differs(by_target[TIME], got_t) or differs(by_target[MEMORY], got_m)
      or differs(by_target[CPUS], kept_cpus) or got_t and not time_read
      or tag.unflagged(ann, by_target[TIME], by_target[MEMORY], by_target[CPUS])) then
    local fixed = tag.applied_tag(ann, got_t, got_m, kept_cpus, got_flag)
    if fixed ~= ann then
      note("tag: as applied")
      ann = fixed
      time_read = got_t and reads_as(ann, got_flag, got_t, limit)
    end
  end
  -- harp guard extends a job only by its tag: in its modes, a time change that the tag, as the guard
  -- reads it, does not flag with its value and the user's own limit beside it would stand until
  -- Slurm kills the job there.
  if got_t and GUARDED[decision.mode] and not time_read then
    local kept = {}
    for _, c in ipairs(plan.changes) do
      if c[1] ~= "time_limit" and c[1] ~= "time_min" then kept[#kept + 1] = c end
    end
    plan.changes = kept
    applied.time, applied.time_min = nil, nil
    fault("time: left alone: no tag harp guard could extend the job by")
    if ann then ann = tag.applied_tag(ann, nil, got_m, kept_cpus) end
  elseif time_note then
    note(time_note)
  end
  plan.rewrote = #plan.changes > 0
  base = tag.appended(base, ann)
  if base ~= comment then set("admin_comment", comment, base) end

  -- The user's line: the daemon's where the job got what it decided, else written from what was
  -- applied (the daemon's would announce a change not made, an action its mode does not carry out
  -- too); none that announces rewrites none of which happened. The daemon's line on a decision that
  -- changes nothing is shown as it is.
  local msg = notice.clean(decision.user_message)
  if plan.rewrote and (not msg or ignored or differs(by_target[TIME], got_t) or differs(by_target[MEMORY], got_m)
      or differs(by_target[CPUS], kept_cpus)) then
    if cpus and cpus_now and cpus < cpus_now and not kept_cpus then applied.kept = {cpus_now, res.why} end
    -- a time cut left in a guarded mode has a tag harp guard extends the job by, up to its own limit
    if GUARDED[decision.mode] and (applied.time or applied.time_min) then applied.extended = limit end
    msg = notice.written(applied, msg)
  elseif (asked or ignored) and not plan.rewrote then
    msg = nil
  end
  plan.message = msg
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

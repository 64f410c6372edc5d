-- Orchestration of one submission: disable switch -> breaker -> request -> gRPC -> decision -> job_desc.
-- Every failure leaves the job as the user submitted it (forged harp tokens aside) and is logged.

local log = require "harp.log"
local request = require "harp.request"
local partitions = require "harp.partitions"
local pb = require "harp.pb"
local apply = require "harp.apply"
local tag = require "harp.tag"
local new_breaker = require "harp.breaker".new
local load_transport = require "harp.transport".load
local switch_present = require "harp.switch".present

local os_time, pcall, tostring, type = os.time, pcall, tostring, type
local format, match, concat, sub = string.format, string.match, table.concat, string.sub

local M = {}
M.METHOD = "/harp.v1.Predictor/Predict"
-- The largest Decision taken, in bytes. One is a few hundred (three targets, a message, an annotation);
-- a larger reply is refused unread. Within it, harp.pb bounds each field (a string's length, the
-- targets, unknown or repeated fields), which keeps what is decoded (16 KiB of 2-byte fields took
-- 2.6 ms) and applied inside slurmctld's locks to a few dozen fields.
M.MAX_DECISION = 16384

local cfg, breaker, transport, transport_err, clock
local was_disabled = false

local function default_clock()
  local ok, clock_mod = pcall(require, "harp.clock")
  if ok and type(clock_mod) == "table" and clock_mod.now then return clock_mod.now end
  return os_time
end

-- config: the validated table from job_submit.lua. deps (tests): transport {call=...}, clock function.
function M.configure(config, deps)
  deps = deps or {}
  cfg = config
  log.prefix = config.log_prefix or "harp"
  clock = deps.clock or default_clock()
  breaker = new_breaker(config.breaker_seconds)
  transport, transport_err = deps.transport, nil
  if not transport then
    transport, transport_err = load_transport()
    if not transport then
      log.error(transport_err .. "; every job passes unchanged")
    elseif transport.degraded then
      log.info(transport.degraded .. ": a wall clock stepped back may hold a call past its deadline")
    end
  end
end

local function disabled()
  local now_disabled = switch_present(cfg.disable_file)
  if now_disabled ~= was_disabled then
    was_disabled = now_disabled
    log.info(now_disabled and ("disabled by " .. cfg.disable_file .. ": jobs pass unchanged")
      or ("re-enabled (" .. cfg.disable_file .. " is gone)"))
  end
  return now_disabled
end

local function who(user, name)
  return format("user=%s name=%s", tostring(user), sub(tostring(name), 1, 64))
end

-- Users may not bring their own harp tokens: the guard trusts the harp: tags in admin_comment.
local function strip_forged(job_desc, submit_uid)
  local cleaned, what = tag.strip_forged(job_desc.admin_comment, submit_uid)
  if not cleaned then return end
  local ok, err = apply.commit(job_desc, {changes = {{"admin_comment", job_desc.admin_comment, cleaned}}})
  local whose = " (admin_comment of " .. who(job_desc.user_name, job_desc.name) .. ")"
  if ok then
    log.info(what .. whose)
  else
    log.error("could not clean admin_comment, " .. what .. whose .. ": " .. tostring(err))
  end
end

-- Whether this submission's decision is on job_desc, for what an error after it says.
local committed = false

local function ask(req)
  if not transport then return nil, transport_err end
  local bytes, err = transport.call(cfg.socket, M.METHOD, pb.encode_request(req), cfg.deadline_ms / 1000,
    M.MAX_DECISION)
  if not bytes then return nil, err end
  return pb.decode_decision(bytes)
end

local function pipeline(job_desc, submit_uid, part_list, t0)
  if tag.opted_out(job_desc.comment) then
    log.debug("opted out by --comment " .. tag.OPT_OUT .. " (" .. who(job_desc.user_name, job_desc.name) .. ")")
    return "opted_out"
  end
  -- A list longer than the request carries: the daemon would judge the job by the partitions before
  -- the cut, and its per-partition rules (a partition off or in shadow mode) must not be escaped
  -- by naming more partitions first.
  local listed = request.partition_names(job_desc, part_list)
  if type(listed) == "string" and #listed > request.MAX_STRING then
    log.info(format("partition list of %d bytes, longer than a request carries (%d): job left alone (%s)",
      #listed, request.MAX_STRING, who(job_desc.user_name, job_desc.name)))
    return "left_alone"
  end
  if not breaker:allow(t0) then
    return "skipped"
  end
  local was_open = breaker:is_open()
  local req = request.build(job_desc, submit_uid, part_list)
  local decision, err = ask(req)
  if not decision then
    local ms = (clock() - t0) * 1000
    -- an error may carry a traceback: one line is enough for slurmctld.log
    local why = match(tostring(err), "^[^\n]*")
    if breaker:failure(clock()) then
      log.error(format("daemon call failed after %.1f ms (%s): jobs pass unchanged, next try in %s s",
        ms, why, tostring(cfg.breaker_seconds)))
    else
      log.info(format("daemon still unavailable after %.1f ms (%s)", ms, why))
    end
    return "unavailable"
  end
  breaker:success()
  if was_open then log.info("daemon reachable again") end

  -- MaxTime by the job's own list: the request's is text, cut and with "?" for bytes that are not UTF-8
  local plan = apply.plan(job_desc, decision, submit_uid, partitions.max_time(part_list, listed))
  local ok, cerr = apply.commit(job_desc, plan)
  committed = ok
  if not ok then
    log.error("could not apply decision, job passes unchanged: " .. tostring(cerr))
    return "error"
  end
  if plan.message then log.user(plan.message) end
  -- the names as the request carries them: job_desc's fields are read in C, and were read once
  local line = format("%s mode=%s %s (%.2f ms)", who(req.user_name, req.job_name), tostring(decision.mode),
    #plan.notes > 0 and concat(plan.notes, ", ") or "no change", (clock() - t0) * 1000)
  -- A decision not carried out as sent (a daemon's slip or skew) is seen at SlurmctldDebug=info too.
  if plan.rewrote or plan.fault then log.info(line) else log.debug(line) end
  return plan.rewrote and "rewritten" or "unchanged"
end

-- Never throws. Returns a short status for tests and callers that care:
-- "disabled", "opted_out", "left_alone" (a partition list longer than a request carries),
-- "skipped" (breaker open), "unavailable", "error", "rewritten" or "unchanged".
-- part_list (optional): slurm_job_submit's second argument, read for the default partition and the
-- job's partitions' MaxTime.
function M.submit(job_desc, submit_uid, part_list)
  if not cfg then
    log.error("not configured; job passes unchanged")
    return "error"
  end
  -- First, whatever follows: switched off, opted out, the daemon away, or an error on the way.
  pcall(strip_forged, job_desc, submit_uid)
  local okd, off = pcall(disabled)
  if okd and off then return "disabled" end
  committed = false
  local ok, res = pcall(pipeline, job_desc, submit_uid, part_list, clock())
  if not ok then
    log.error((committed and "internal error after the decision was applied: "
      or "internal error, job passes unchanged: ") .. tostring(res))
    return "error"
  end
  return res
end

return M

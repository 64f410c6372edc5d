-- sbatch's side of the advice (docs/advice.md, "At submission: the cli_filter hook"): in
-- slurm_cli_pre_submit, ask the daemon's Advisor for the job about to be sent and print one line to
-- stderr when it knows a cheaper or faster way. Never throws and never delays sbatch past the deadline;
-- any failure means no line (and, with HARP_ADVICE_DEBUG=1, one line saying why).

local pb = require "harp.pb"
local sbatch_request = require "harp.sbatch_request"
local advice_line = require "harp.advice_line"
local log = require "harp.log"
local load_transport = require "harp.transport".load

local pcall, tostring, type = pcall, tostring, type
local format, lower, match = string.format, string.lower, string.match

local M = {}
M.METHOD = "/harp.v1.Advisor/Advise"
M.SILENCE_ENV = "HARP_ADVICE"
M.DEBUG_ENV = "HARP_ADVICE_DEBUG"
local OFF = {["0"] = true, off = true, no = true, ["false"] = true}

local cfg, transport, transport_err, getenv, write

local function default_write(text)
  io.stderr:write(text, "\n")
end

-- config: validated by cli_filter.lua ({socket, deadline_ms}). deps (tests): transport {call=...},
-- getenv function, write function (one line of text).
function M.configure(config, deps)
  deps = deps or {}
  cfg = config
  getenv = deps.getenv or os.getenv
  write = deps.write or default_write
  transport, transport_err = deps.transport, nil
  if not transport then transport, transport_err = load_transport() end
end

local function env(name)
  local ok, v = pcall(getenv, name)
  if ok and type(v) == "string" then return v end
  return nil
end

local function silenced()
  local v = env(M.SILENCE_ENV)
  return v ~= nil and OFF[lower(v)] == true
end

local function debug_line(why)
  if env(M.DEBUG_ENV) == "1" then
    pcall(write, "harp: no advice (" .. log.escape(match(tostring(why), "^[^\n]*")) .. ")")
  end
end

-- line, "printed" | nil, status, why
local function advise(options)
  local req = sbatch_request.build(options)
  if not transport then return nil, "unavailable", transport_err end
  local payload = pb.encode_advice_request(req, sbatch_request.exclusive(options))
  local bytes, err = transport.call(cfg.socket, M.METHOD, payload, cfg.deadline_ms / 1000)
  if not bytes then return nil, "unavailable", err end
  local advice, derr = pb.decode_advice(bytes)
  if not advice then return nil, "unavailable", "bad answer: " .. tostring(derr) end
  local line = advice_line.line(advice, req)
  if not line then
    return nil, "nothing", format("%d options, none better than asked; evidence: %s", #advice.options,
      tostring(advice.evidence))
  end
  return line, "printed"
end

-- Never throws. Returns a short status for tests: "not_configured", "not_sbatch", "silenced",
-- "unavailable", "nothing" (no line) or "printed".
-- offset: the het job component; only the first (0) is advised.
function M.pre_submit(options, offset)
  if not cfg then return "not_configured" end
  local ok, is_batch = pcall(sbatch_request.is_sbatch, options)
  if not ok or not is_batch or (offset ~= nil and offset ~= 0) then return "not_sbatch" end
  if silenced() or sbatch_request.quiet(options) then return "silenced" end
  local okc, line, status, why = pcall(advise, options)
  if not okc then
    debug_line("internal error: " .. tostring(line))
    return "unavailable"
  end
  if line == nil then
    debug_line(why)
    return status
  end
  if not pcall(write, line) then return "unavailable" end
  return "printed"
end

return M

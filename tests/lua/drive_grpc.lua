-- Drives the plugin's gRPC client against a real server, one JSON command per stdin line,
-- one JSON result per stdout line (for tests/integration/lua_driver.py).
--   lua5.1 drive_grpc.lua SOCKET [ENTRY]   (ENTRY: a job_submit.lua for the "submit" op)
-- Commands:
--   {"op":"call","deadline_ms":50,"job_desc":{...},"submit_uid":1000}
--       -> {"ok":bool,"err":str,"ms":float,"decision":{...},"stats":{calls,connects,retries}}
--   {"op":"bench","n":200,"deadline_ms":50,"job_desc":{...}} -> {"p50_ms":..,"p99_ms":..,"errors":n}
--   {"op":"raw","method":"/pkg.Svc/M","payload":"..","repeat":1,"deadline_ms":50}
--       -> {"ok":bool,"err":str,"ms":float,"size":n,"sum":n,"head":hex,"stats":{..},"connected":bool}
--          (the payload repeated `repeat` times is sent as it is; sum: the response's bytes added up)
--   {"op":"set","max_response":n,"window":n,"precheck":bool} -> {"ok":true,"sigpipe":..}
--   {"op":"precheck","on":false}   -> {"ok":true}   (idle-connection check before reuse)
--   {"op":"close"}                 -> {"ok":true}
--   {"op":"submit","job_desc":{...},"submit_uid":1000}
--       -> {"rc":..., "job_desc":{after}, "logs":{info=[..],error=[..],user=[..]}} through ENTRY
local here = (arg[0]):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../../plugin/?.lua;" .. package.path

local cjson = require "cjson"
local grpc = require "harp.grpc"
local now = require "harp.clock".now
local pb = require "harp.pb"
local request = require "harp.request"

local socket_path = assert(arg[1], "usage: drive_grpc.lua SOCKET [ENTRY]")
local entry_path = arg[2]
local METHOD = "/harp.v1.Predictor/Predict"

local function denull(t)
  if type(t) ~= "table" then return t end
  for k, v in pairs(t) do
    if v == cjson.null then t[k] = nil else t[k] = denull(v) end
  end
  return t
end

local function one_call(cmd)
  local payload = pb.encode_request(request.build(cmd.job_desc or {}, cmd.submit_uid))
  local t0 = now()
  local bytes, err = grpc.call(socket_path, METHOD, payload, (cmd.deadline_ms or 50) / 1000)
  local ms = (now() - t0) * 1000
  local decision
  if bytes then decision, err = pb.decode_decision(bytes) end
  return decision, err, ms
end

-- slurmctld stand-in for the "submit" op: the slurm table and one loaded job_submit.lua
local logs
local function reset_logs()
  logs = {info = {}, error = {}, debug = {}, user = {}}
end
reset_logs()
local function logger(kind)
  return function(fmt, ...) table.insert(logs[kind], string.format(fmt, ...)) end
end
slurm = {SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, INFINITE = 4294967295, NO_VAL16 = 65534,
  log_info = logger("info"), log_error = logger("error"), log_debug = logger("debug"), log_user = logger("user")}
local entry
local function submit(cmd)
  if not entry then
    local chunk = assert(loadfile(assert(entry_path, "no ENTRY given")))
    entry = setmetatable({}, {__index = _G})
    setfenv(chunk, entry)
    chunk()
  end
  reset_logs()
  local jd = cmd.job_desc or {}
  local t0 = now()
  local rc = entry.slurm_job_submit(jd, {}, cmd.submit_uid or 1000)
  return {rc = rc, job_desc = jd, logs = logs, ms = (now() - t0) * 1000}
end

local function stats()
  local s = grpc.stats
  return {calls = s.calls, connects = s.connects, retries = s.retries}
end

for line in io.lines() do
  local ok, cmd = pcall(cjson.decode, line)
  local out
  if not ok then
    out = {ok = false, err = "bad command: " .. tostring(cmd)}
  else
    cmd = denull(cmd)
    if cmd.op == "call" then
      local decision, err, ms = one_call(cmd)
      if decision then
        for _, t in ipairs(decision.targets) do
          for _, k in ipairs {"predicted", "quantile", "new_value"} do
            if t[k] then t[k] = string.format("%.17g", t[k]) end
          end
        end
      end
      out = {ok = decision ~= nil, err = err, ms = ms, decision = decision, stats = stats(),
        connected = grpc.connected()}
    elseif cmd.op == "bench" then
      local times, errors = {}, 0
      for i = 1, cmd.n or 200 do
        local d, _, ms = one_call(cmd)
        if not d then errors = errors + 1 end
        times[i] = ms
      end
      table.sort(times)
      out = {p50_ms = times[math.ceil(#times * 0.5)], p99_ms = times[math.ceil(#times * 0.99)],
        max_ms = times[#times], errors = errors, stats = stats()}
    elseif cmd.op == "submit" then
      out = submit(cmd)
    elseif cmd.op == "raw" then
      local payload = string.rep(cmd.payload or "", cmd["repeat"] or 1)
      local t0 = now()
      local bytes, err = grpc.call(socket_path, cmd.method, payload, (cmd.deadline_ms or 50) / 1000)
      local ms = (now() - t0) * 1000
      out = {ok = bytes ~= nil, err = err, ms = ms, stats = stats(), connected = grpc.connected()}
      if bytes then
        local sum = 0
        for i = 1, #bytes do sum = sum + bytes:byte(i) end
        out.size, out.sum = #bytes, sum
        out.head = bytes:sub(1, 64):gsub(".", function(c) return string.format("%02x", c:byte()) end)
      end
    elseif cmd.op == "set" then
      if cmd.max_response then grpc.MAX_RESPONSE = cmd.max_response end
      if cmd.window then grpc.h2.WINDOW = cmd.window end
      if cmd.precheck ~= nil then grpc.precheck = cmd.precheck end
      out = {ok = true, sigpipe = grpc.h2.sigpipe}
    elseif cmd.op == "precheck" then
      grpc.precheck = cmd.on and true or false
      out = {ok = true}
    elseif cmd.op == "close" then
      grpc.close()
      out = {ok = true}
    else
      out = {ok = false, err = "unknown op " .. tostring(cmd.op)}
    end
  end
  io.write(cjson.encode(out), "\n")
  io.flush()
end

-- Drives the plugin's gRPC client against a real server, one JSON command per stdin line,
-- one JSON result per stdout line (for tests/integration/lua_driver.py).
--   lua5.1 drive_grpc.lua SOCKET [ENTRY]   (ENTRY: a job_submit.lua for the "submit" op)
-- Commands:
--   {"op":"call","deadline_ms":50,"job_desc":{...},"submit_uid":1000}
--       -> {"ok":bool,"err":str,"ms":float,"decision":{...},"stats":{calls,connects,retries}}
--   {"op":"bench","n":200,"deadline_ms":50,"job_desc":{...}}
--       -> {"p50_ms":..,"p99_ms":..,"own_p50_ms":..,"errors":n}
--   {"op":"raw","method":"/pkg.Svc/M","payload":"..","repeat":1,"deadline_ms":50}
--       -> {"ok":bool,"err":str,"ms":float,"size":n,"sum":n,"head":hex,"stats":{..},"connected":bool}
--          (the payload repeated `repeat` times is sent as it is; sum: the response's bytes added up)
--   {"op":"set","max_response":n,"window":n,"precheck":bool} -> {"ok":true,"sigpipe":..}
--   {"op":"precheck","on":false}   -> {"ok":true}   (idle-connection check before reuse)
--   {"op":"close"}                 -> {"ok":true}
--   {"op":"submit","job_desc":{...},"submit_uid":1000}
--       -> {"rc":..., "job_desc":{after}, "logs":{info=[..],error=[..],user=[..]},"stats":{..}} through ENTRY
-- call, raw and submit also answer the times of `timed` (ms is the call's wall time; call and raw:
-- late_ms too), and take "peers": [schedstat files] (the threads serving the calls) for peer_queued_ms.
local here = (arg[0]):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../../plugin/?.lua;" .. package.path

local cjson = require "cjson"
local clock = require "harp.clock"
local now = clock.now

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

-- On a busy machine a call's wall time also holds scheduling delays that are not the client's doing:
-- time spent runnable, waiting for a CPU. Linux counts it per thread (schedstat's 2nd field, run_delay,
-- in ns). nil where there is no schedstat: then nothing is taken off.
local function run_delay_ms(f)
  if not f or not f:seek("set", 0) then return nil end
  local ns = (f:read("*l") or ""):match("^%d+%s+(%d+)")
  return ns and tonumber(ns) / 1e6
end

local function open_schedstat(path)
  local f = io.open(path, "r")
  if f then f:setvbuf("no") end -- unbuffered: each read after a seek is a fresh one
  return f
end
local SELF = open_schedstat("/proc/thread-self/schedstat")

local function run_delays(paths)
  local t = {}
  for _, path in ipairs(paths) do
    local f = open_schedstat(path)
    t[path] = run_delay_ms(f)
    if f then f:close() end
  end
  return t
end

-- A call's deadline is on the wall clock: a client that got little CPU before it has no less right to
-- stop at it, and no more time after it. So the client's clock is watched: the run_delay at its last
-- reading before the deadline (every wait it starts, and every stretch of work, is bounded by such a
-- reading) tells how much of the time past the deadline it spent waiting for a CPU. A flood has the
-- client read its clock thousands of times a call: schedstat (10 us a read) is read every 0.5 ms.
local SNAP_EVERY = 0.0005
local watch -- {deadline = s, t = a reading before it, q = run_delay then}, during a call
clock.now = function()
  local t = now()
  local w = watch
  if w and t < w.deadline and t - w.t >= SNAP_EVERY then w.t, w.q = t, run_delay_ms(SELF) end
  return t
end
local grpc = require "harp.grpc" -- after the wrap: harp.grpc and harp.h2 keep the clock they load with
local pb = require "harp.pb"
local request = require "harp.request"

-- Runs fn() -> a, b and returns a, b, times: ms (fn's wall time); cpu_ms (this process's CPU time);
-- within a window around fn's, queued_ms (this thread runnable but not running) and peer_queued_ms
-- (the longest such time of one thread of `peers`, schedstat files; threads that come or go meanwhile
-- are left out); own_ms: that window's wall time less both. Each delay taken off lies within the
-- window, which holds fn's; the peers' are not summed, as their threads may wait for a CPU at the
-- same time (summed, they came to 3 times a call's wall time under load). A peer's wait excuses the
-- client only while the client itself was blocked (neither running nor runnable): it is taken off
-- up to that time, so the client's own work is never. So own_ms is the time fn spent working or
-- waiting of its own accord (or for its peers' work), less at most the time the client was blocked
-- while a peer thread waited for a CPU that the client did not wait for.
-- With deadline_s (the call's timeout), late_ms: how long past that deadline fn returned, less the
-- time the client waited for a CPU since its last clock reading before the deadline (at most all of
-- it): its own work and waits past the deadline, less at most the time between that reading and
-- the deadline (the client's own gap between readings, and SNAP_EVERY).
local function timed(peers, fn, deadline_s)
  peers = peers or {}
  local w0, q0, p0 = now(), run_delay_ms(SELF), run_delays(peers)
  local c0, t0 = os.clock(), now()
  local w = deadline_s and {deadline = t0 + deadline_s, t = t0, q = run_delay_ms(SELF)}
  watch = w
  local a, b = fn()
  watch = nil
  local q1 = run_delay_ms(SELF) -- before t1: no wait after fn's end is taken off its time
  local t1, c1 = now(), os.clock()
  local p1, w1 = run_delays(peers), now()
  local queued = q0 and q1 and q1 - q0 or 0
  local window, cpu = (w1 - w0) * 1000, (c1 - c0) * 1000
  local peer_queued = 0
  for path, d1 in pairs(p1) do
    if p0[path] and d1 - p0[path] > peer_queued then peer_queued = d1 - p0[path] end
  end
  peer_queued = math.min(peer_queued, math.max(0, window - cpu - queued)) -- only while blocked
  local times = {ms = (t1 - t0) * 1000, cpu_ms = cpu, queued_ms = queued,
    peer_queued_ms = peer_queued, own_ms = window - queued - peer_queued, schedstat = q0 ~= nil}
  if w then
    local past = (t1 - w.deadline) * 1000
    local since = w.q and q1 and q1 - w.q or 0
    times.late_ms = past - math.max(0, math.min(past, since))
  end
  return a, b, times
end

local function one_call(cmd, bench)
  local payload = pb.encode_request(request.build(cmd.job_desc or {}, cmd.submit_uid))
  local timeout = (cmd.deadline_ms or 50) / 1000
  local bytes, err, times = timed(cmd.peers, function()
    return grpc.call(socket_path, METHOD, payload, timeout)
  end, not bench and timeout)
  local decision
  if bytes then decision, err = pb.decode_decision(bytes) end
  return decision, err, times
end

local function merge(out, times)
  for k, v in pairs(times) do out[k] = v end
  return out
end

local function stats()
  local s = grpc.stats
  return {calls = s.calls, connects = s.connects, retries = s.retries}
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
  local rc, _, times = timed(cmd.peers, function() return entry.slurm_job_submit(jd, {}, cmd.submit_uid or 1000) end)
  return merge({rc = rc, job_desc = jd, logs = logs, stats = stats()}, times)
end

for line in io.lines() do
  local ok, cmd = pcall(cjson.decode, line)
  local out
  if not ok then
    out = {ok = false, err = "bad command: " .. tostring(cmd)}
  else
    cmd = denull(cmd)
    if cmd.op == "call" then
      local decision, err, times = one_call(cmd)
      if decision then
        for _, t in ipairs(decision.targets) do
          for _, k in ipairs {"predicted", "quantile", "new_value"} do
            if t[k] then t[k] = string.format("%.17g", t[k]) end
          end
        end
      end
      out = merge({ok = decision ~= nil, err = err, decision = decision, stats = stats(),
        connected = grpc.connected()}, times)
    elseif cmd.op == "bench" then
      local walls, owns, errors = {}, {}, 0
      for i = 1, cmd.n or 200 do
        local d, _, times = one_call(cmd, true) -- no clock watch: it costs a read of schedstat a reading
        if not d then errors = errors + 1 end
        walls[i], owns[i] = times.ms, times.own_ms
      end
      table.sort(walls)
      table.sort(owns)
      out = {p50_ms = walls[math.ceil(#walls * 0.5)], p99_ms = walls[math.ceil(#walls * 0.99)],
        max_ms = walls[#walls], own_p50_ms = owns[math.ceil(#owns * 0.5)], errors = errors, stats = stats()}
    elseif cmd.op == "submit" then
      out = submit(cmd)
    elseif cmd.op == "raw" then
      local payload = string.rep(cmd.payload or "", cmd["repeat"] or 1)
      local timeout = (cmd.deadline_ms or 50) / 1000
      local bytes, err, times = timed(cmd.peers, function()
        return grpc.call(socket_path, cmd.method, payload, timeout)
      end, timeout)
      out = merge({ok = bytes ~= nil, err = err, stats = stats(), connected = grpc.connected()}, times)
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

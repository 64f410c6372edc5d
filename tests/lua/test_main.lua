local T = ...
local main = require "harp.main"
local W = require "pbtest"

local function config(over)
  local c = {socket = "/nonexistent/harp.sock", deadline_ms = 50, breaker_seconds = 30,
    disable_file = "/nonexistent/harp.disable", log_prefix = "harp"}
  for k, v in pairs(over or {}) do c[k] = v end
  return c
end

local fake = T.fake_transport

-- A fake transport that fails each call: ``kind`` "fail" returns ``why`` as an error, "raise" raises it.
local function broken(kind, why, reply)
  local tr = fake(reply)
  tr[kind] = why
  return tr
end

-- A job_desc over ``store`` whose setter raises where ``fails(key, value)`` says so.
local function failing_setter(store, fails)
  return setmetatable({}, {__index = store, __newindex = function(_, k, v)
    if fails(k, v) then error("setter failed") end
    store[k] = v
  end})
end

local function clock_at(t)
  local c = {now = t}
  return c, function() return c.now end
end

local REWRITE_TIME = W.decision {targets = {{target = 1, action = 2, new_value = 60, model_version = "m"}},
  user_message = "harp: time limit lowered to 60 min", annotation = "harp:rewrite,t!=60,t0=120,v=m", mode = "rewrite"}

T.test("full pipeline applies the decision and tells the user once", function()
  local tr = fake(REWRITE_TIME)
  main.configure(config(), {transport = tr})
  local jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "rewritten", "status")
  T.eq(jd.time_limit, 60, "time")
  T.eq(jd.admin_comment, "harp:rewrite,t!=60,t0=120,v=m", "annotation")
  T.eq(#T.logs.user, 1, "one user message")
  T.eq(T.logs.user[1], "harp: time limit lowered to 60 min", "message")
  T.eq(tr.last.method, "/harp.v1.Predictor/Predict", "method")
  T.eq(tr.last.socket, "/nonexistent/harp.sock", "socket")
  T.eq(tr.last.timeout_s, 0.05, "deadline")
  T.eq(tr.last.max_response, 16384, "a Decision of 16 KiB at most")
  T.ok(T.logged("info", "time_limit 120->60 min"), "logged")
end)

T.test("a job asking more than its partition's MaxTime passes as asked", function()
  local tr = fake(REWRITE_TIME)
  main.configure(config(), {transport = tr})
  local jd = T.job_desc {partition = "short"}
  T.eq(main.submit(jd, 1000, T.part_list({"short", "long"}, "long", false, {short = 100})), "unchanged", "status")
  T.eq(jd.time_limit, 120, "time kept")
  T.eq(jd.admin_comment, "harp:rewrite,t=60,t0=120,v=m", "annotated, no flag")
  T.eq(#T.logs.user, 0, "nothing said to the user")
  jd = T.job_desc {partition = "long"}
  T.eq(main.submit(jd, 1000, T.part_list({"short", "long"}, "long", false, {short = 100})), "rewritten", "long")
  T.eq(jd.time_limit, 60, "cut where MaxTime allows the request")
end)

T.test("a partition list longer than a request carries: the job is left alone", function()
  -- 30 partitions of 16 bytes, then "short" (MaxTime 100 min) past the request's 255 bytes: the daemon
  -- saw neither "short" nor any rule of it, and the MaxTime check missed it.
  local names = {}
  for i = 1, 30 do names[i] = string.format("gpu_partition_%02d", i) end
  names[31] = "short"
  local listed = table.concat(names, ",")
  local tr = fake(REWRITE_TIME)
  main.configure(config(), {transport = tr})
  local jd = T.job_desc {partition = listed, admin_comment = "harp:forged mine"}
  T.eq(main.submit(jd, 1000, T.part_list(names, names[1], false, {short = 100})), "left_alone", "status")
  T.eq(tr.calls, 0, "the daemon is not asked")
  T.same(jd, T.job_desc {partition = listed, admin_comment = "mine"}, "as submitted, forged token gone")
  T.ok(T.logged("info", "partition list of 515 bytes, longer than a request carries (255): job left alone"),
    "one line")
  -- Within the bound: served as ever.
  jd = T.job_desc {partition = table.concat(names, ",", 17)}
  T.eq(#jd.partition, 243, "a list within 255 bytes")
  T.eq(main.submit(jd, 1000, T.part_list(names, names[1], false, {short = 100})), "unchanged", "served")
  T.eq(jd.time_limit, 120, "left as asked above short's MaxTime")
end)

T.test("MaxTime is read by the job's own partition names, not the request's text", function()
  -- A name that is not UTF-8 reaches the daemon with "?" for its byte; part_list has it as it is.
  local odd = "sh\255ort"
  main.configure(config(), {transport = fake(REWRITE_TIME)})
  local jd = T.job_desc {partition = odd}
  T.eq(main.submit(jd, 1000, T.part_list({odd, "long"}, "long", false, {[odd] = 100})), "unchanged", "status")
  T.eq(jd.time_limit, 120, "left as asked above its MaxTime")
end)

T.test("the user is told only what was applied: no time cut above the partition's MaxTime", function()
  local basis = " (90% of similar past jobs finished within it)."
  main.configure(config(), {transport = fake(W.decision {mode = "rewrite",
    user_message = "harp: lowered time from 02:00:00 to 01:00:00, memory from 4000 MB to 2000 MB" .. basis,
    annotation = "harp:rewrite,t!=60/q0.9,t0=120,m!=2000/q0.9,m0=4000,v=t@1+m@1",
    targets = {{target = 1, action = 2, new_value = 60, model_version = "t@1"},
      {target = 2, action = 2, new_value = 2000, model_version = "m@1"}}})})
  local jd = T.job_desc {partition = "short"}
  T.eq(main.submit(jd, 1000, T.part_list({"short", "long"}, "long", false, {short = 100})), "rewritten", "status")
  T.eq(jd.time_limit, 120, "time kept")
  T.eq(jd.min_mem_per_node, 2000, "memory cut")
  T.eq(jd.admin_comment, "harp:rewrite,t=60/q0.9,t0=120,m!=2000/q0.9,m0=4000,v=t@1+m@1", "the tag")
  T.eq(#T.logs.user, 1, "one line")
  T.eq(T.logs.user[1], "harp: lowered memory from 4000 MB to 2000 MB" .. basis, "memory only")
end)

T.test("log messages with % are safe", function()
  main.configure(config(), {transport = fake(W.decision {user_message = "100% sure", mode = "shadow"})})
  local jd = T.job_desc {name = "50%d%s"}
  T.eq(main.submit(jd, 1000), "unchanged", "status")
  T.eq(T.logs.user[1], "100% sure", "user message verbatim")
end)

T.test("disable file means a pass-through that still strips forged tags", function()
  local dir = T.tmpdir()
  local tr = fake(REWRITE_TIME)
  main.configure(config {disable_file = dir .. "/off"}, {transport = tr})
  T.write(dir .. "/off", "")
  local jd = T.job_desc {admin_comment = "harp:forged mine"}
  T.eq(main.submit(jd, 1000), "disabled", "status")
  T.eq(tr.calls, 0, "daemon not asked")
  T.same(jd, T.job_desc {admin_comment = "mine"}, "only the user's harp: token gone")
  jd = T.job_desc {admin_comment = "harp:shadow,v=x"}
  T.eq(main.submit(jd, 0), "disabled", "root")
  T.same(jd, T.job_desc {admin_comment = "harp:shadow,v=x"}, "root's tokens kept")
  T.ok(T.logged("info", "disabled by"), "logged once")
  os.remove(dir .. "/off")
  T.eq(main.submit(T.job_desc(), 1000), "rewritten", "re-enabled on the next call")
  T.ok(T.logged("info", "re-enabled"), "logged")
  T.rmdir(dir)
end)

T.test("daemon failure: job unchanged, breaker skips for breaker_seconds, then one probe", function()
  local tr = fake(nil)
  tr.fail = "connect: No such file or directory"
  local clk, now = clock_at(1000)
  main.configure(config {breaker_seconds = 30}, {transport = tr, clock = now})
  local jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "unavailable", "first failure")
  T.same(jd, T.job_desc(), "unchanged")
  T.eq(#T.logs.error, 1, "one error logged")
  T.ok(T.logs.error[1]:find("No such file", 1, true), T.logs.error[1])
  clk.now = 1010
  T.eq(main.submit(T.job_desc(), 1000), "skipped", "breaker open")
  clk.now = 1029.9
  T.eq(main.submit(T.job_desc(), 1000), "skipped", "still open")
  T.eq(tr.calls, 1, "daemon not asked while open")
  clk.now = 1030
  T.eq(main.submit(T.job_desc(), 1000), "unavailable", "probe fails")
  T.eq(tr.calls, 2, "one probe")
  T.eq(#T.logs.error, 1, "failed probe is not another error")
  clk.now = 1031
  T.eq(main.submit(T.job_desc(), 1000), "skipped", "re-armed")
  clk.now = 1060
  tr.fail, tr.reply = nil, REWRITE_TIME
  jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "rewritten", "probe succeeds")
  T.eq(jd.time_limit, 60, "applied")
  T.ok(T.logged("info", "reachable again"), "recovery logged")
  clk.now = 1060.01
  T.eq(main.submit(T.job_desc(), 1000), "rewritten", "closed")
  T.eq(tr.calls, 4, "calls")
end)

T.test("forged tags are stripped even when the daemon is down", function()
  local tr = fake(nil)
  tr.fail = "down"
  main.configure(config(), {transport = tr, clock = function() return 0 end})
  local jd = T.job_desc {admin_comment = "harp:t=1 mine"}
  main.submit(jd, 1000)
  T.eq(jd.admin_comment, "mine", "stripped on failure")
  jd = T.job_desc {admin_comment = "harp:t=1 mine"}
  T.eq(main.submit(jd, 1000), "skipped", "breaker open")
  T.eq(jd.admin_comment, "mine", "stripped while skipped")
end)

T.test("an error after the decision is applied keeps it whole, harp's tag included", function()
  local calls = 0
  local function clock()  -- t0, then the log line's reading, after the commit
    calls = calls + 1
    if calls == 2 then error("clock failed") end
    return 0
  end
  main.configure(config(), {transport = fake(REWRITE_TIME), clock = clock})
  local jd = T.job_desc {admin_comment = "harp:forged mine"}
  T.eq(main.submit(jd, 1000), "error", "status")
  T.eq(jd.time_limit, 60, "the decision stays")
  T.eq(jd.admin_comment, "mine harp:rewrite,t!=60,t0=120,v=m", "with its tag, the forged one gone")
  T.ok(T.logged("error", "after the decision was applied"), T.logs.error[1])
end)

T.test("the tag written records the CPUs the job got, the user's forged tag gone", function()
  -- -n 2 -c 4 cut to 3 CPUs: whole CPUs per task give 4, and the tag says so.
  main.configure(config(), {transport = fake(W.decision {targets = {{target = 3, action = 2, new_value = 3,
    model_version = "c1"}}, annotation = "harp:rewrite,c!=3/q0.9,c0=8,v=c1", mode = "rewrite"})})
  local jd = T.job_desc {admin_comment = "harp:rewrite,c!=1 mine", cpus_per_task = 4, min_cpus = 8, num_tasks = 2}
  T.eq(main.submit(jd, 1000), "rewritten", "status")
  T.eq(jd.min_cpus, 4, "cpus")
  T.eq(jd.admin_comment, "mine harp:rewrite,c!=4/q0.9,c0=8,v=c1", "the tag as applied")
  T.ok(T.logged("info", "tag: as applied"), "logged")
end)

T.test("a strip that cannot be written is logged as an error", function()
  main.configure(config(), {transport = broken("fail", "down")})
  local store = T.job_desc {admin_comment = "harp:t=1 mine"}
  local jd = failing_setter(store, function(k, v) return k == "admin_comment" and v == "mine" end)
  T.eq(main.submit(jd, 1000), "unavailable", "status")
  T.ok(T.logged("error", "could not clean admin_comment, stripped user-supplied harp tokens"), "logged")
  T.ok(not T.logged("info", "stripped user-supplied"), "not claimed")
end)

T.test("forged tags are stripped when the plugin cannot apply a decision", function()
  -- setting the annotation fails: the commit is rolled back to the comment already stripped
  main.configure(config(), {transport = fake(REWRITE_TIME)})
  local store = T.job_desc {admin_comment = "harp:t=1 mine"}
  local jd = failing_setter(store, function(k, v) return k == "admin_comment" and v ~= "mine" end)
  T.eq(main.submit(jd, 1000), "error", "decision not applied")
  T.eq(store.admin_comment, "mine", "stripped after the rollback")
  T.eq(store.time_limit, T.job_desc().time_limit, "the decision's limit rolled back")
  T.eq(#T.logs.user, 0, "nothing told to the user")
end)

T.test("garbage from the daemon counts as a failure, job unchanged", function()
  local tr = fake("\10\255\255\255\255\15")
  main.configure(config(), {transport = tr})
  local jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "unavailable", "status")
  T.same(jd, T.job_desc(), "unchanged")
  T.ok(T.logs.error[1]:find("truncated", 1, true), T.logs.error[1])
end)

T.test("a decision of more than 16 targets: job unchanged, one line", function()
  local t = {target = 1, action = 2, new_value = 60, model_version = "m"}
  local targets = {}
  for i = 1, 17 do targets[i] = t end
  main.configure(config(), {transport = fake(W.decision {targets = targets, mode = "rewrite",
    annotation = "harp:rewrite,t!=60,v=m", user_message = "lowered"})})
  local jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "unavailable", "status")
  T.same(jd, T.job_desc(), "unchanged")
  T.eq(#T.logs.error + #T.logs.info, 1, "one line")
  T.ok(T.logged("error", "(more than 16 targets)"), T.logs.error[1])
  T.eq(#T.logs.user, 0, "nothing told to the user")
end)

T.test("a Decision padded to 16 KiB: job unchanged, one line, soon", function()
  local clock = require "harp.clock".now
  for _, case in ipairs(W.padded_decisions(main.MAX_DECISION)) do
    T.fake_slurm()
    main.configure(config(), {transport = fake(case[2])})
    local jd = T.job_desc()
    local t0 = clock()
    T.eq(main.submit(jd, 1000), "unavailable", case[1] .. ": status")
    T.ok(clock() - t0 < 0.005, string.format("%s: %.2f ms", case[1], (clock() - t0) * 1000))
    T.same(jd, T.job_desc(), case[1] .. ": unchanged")
    T.eq(#T.logs.error, 1, case[1] .. ": one line")
    T.ok(T.logs.error[1]:find("longer than") or T.logs.error[1]:find("unknown or repeated fields"),
      T.logs.error[1])
    T.eq(#T.logs.user, 0, case[1] .. ": nothing told to the user")
  end
end)

T.test("a Decision at the bounds is applied", function()
  main.configure(config(), {transport = fake(W.maximal_decision())})
  local jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "rewritten", "status")
  T.eq(jd.time_limit, 60, "time")
  T.eq(jd.min_mem_per_node, 2000, "memory")
  T.eq(jd.min_cpus, 2, "cpus")
  T.eq(#jd.admin_comment, 512, "the longest annotation appended")
  T.eq(#T.logs.user[1], 512, "the longest message shown")
  T.eq(#T.logs.error, 0, "no error")
end)

T.test("runtime errors inside the pipeline leave job_desc unchanged", function()
  -- the transport raises
  main.configure(config(), {transport = broken("raise", "transport exploded", REWRITE_TIME)})
  local jd = T.job_desc {admin_comment = "ok"}
  T.eq(main.submit(jd, 1000), "error", "status")
  T.same(jd, T.job_desc {admin_comment = "ok"}, "unchanged")
  T.ok(T.logged("error", "transport exploded"), "logged")
  -- a user's harp: tokens are stripped all the same: the guard trusts the tags it finds there
  jd = T.job_desc {admin_comment = "harp:extend,t!=1,t0=100000 mine"}
  T.eq(main.submit(jd, 1000), "error", "status")
  T.same(jd, T.job_desc {admin_comment = "mine"}, "only the forged tokens gone")

  -- reading a field raises while planning
  main.configure(config(), {transport = fake(REWRITE_TIME)})
  local store = T.job_desc()
  jd = setmetatable({}, {__index = function(_, k)
    if k == "time_limit" then error("field read failed") end
    return store[k]
  end, __newindex = store})
  T.eq(main.submit(jd, 1000), "error", "status")
  T.same(store, T.job_desc(), "unchanged")

  -- a setter raises halfway through the commit
  store = T.job_desc()
  jd = failing_setter(store, function(k) return k == "admin_comment" end)
  T.eq(main.submit(jd, 1000), "error", "status")
  T.same(store, T.job_desc(), "rolled back")
  T.eq(#T.logs.user, 0, "nothing told to the user")
end)

T.test("the request sent carries the job's fields", function()
  local tr = fake(W.decision {mode = "off"})
  main.configure(config(), {transport = tr})
  main.submit(T.job_desc(), 1000)
  local pb = require "harp.pb"
  local request = require "harp.request"
  local expected = request.build(T.job_desc(), 1000)
  expected.submit_time = nil
  local payload = tr.last.payload
  -- submit_time (field 20, the last one) varies: compare the bytes before it
  local without_time = pb.encode_request(expected)
  T.eq(payload:sub(1, #without_time), without_time, "payload prefix")
  T.eq(payload:byte(#without_time + 1), 160, "then field 20 (key 0xa0 0x01)")
end)

T.test("missing transport (no lua-http) fails open", function()
  local saved = package.loaded["harp.grpc"]
  package.loaded["harp.grpc"] = nil
  package.preload["harp.grpc"] = function() error("module 'http.h2_connection' not found") end
  local ok, err = pcall(main.configure, config())
  package.preload["harp.grpc"], package.loaded["harp.grpc"] = nil, saved
  T.ok(ok, err)
  T.ok(T.logged("error", "h2_connection"), "logged at configure")
  local jd = T.job_desc()
  T.eq(main.submit(jd, 1000), "unavailable", "status")
  T.same(jd, T.job_desc(), "unchanged")
end)

T.test("real transport, no socket: fast failure, job unchanged", function()
  main.configure(config {socket = "/nonexistent/harp.sock"})
  local jd = T.job_desc()
  local t0 = os.clock()
  T.eq(main.submit(jd, 1000), "unavailable", "status")
  T.ok(os.clock() - t0 < 0.02, "fast")
  T.same(jd, T.job_desc(), "unchanged")
  T.ok(T.logged("error", "No such file"), T.logs.error[1])
end)

T.test("an unreadable disable file still disables", function()
  local dir = T.tmpdir()
  local tr = fake(REWRITE_TIME)
  -- a path below a regular file fails with ENOTDIR (absent); a directory opens fine (present)
  main.configure(config {disable_file = dir .. "/file/off"}, {transport = tr})
  T.write(dir .. "/file", "")
  T.eq(main.submit(T.job_desc(), 1000), "rewritten", "ENOTDIR means absent")
  main.configure(config {disable_file = dir}, {transport = tr})
  T.eq(main.submit(T.job_desc(), 1000), "disabled", "present")
  T.rmdir(dir)
end)

-- A FIFO at `path`, and a writer that opens it a second later: a check that opened it for reading
-- would wait that second (for good, without the writer) instead of failing the test by hanging it.
local function fifo_with_late_writer(path)
  T.ok(os.execute("mkfifo '" .. path .. "'") == 0, "mkfifo")
  os.execute("(sleep 1; exec 3<>'" .. path .. "'; sleep 1) >/dev/null 2>&1 &")
end

T.test("a FIFO as the disable file disables at once, lua-posix or not", function()
  local dir = T.tmpdir()
  local fifo = dir .. "/off"
  fifo_with_late_writer(fifo)
  local clock = require "harp.clock".now
  local tr = fake(REWRITE_TIME)
  main.configure(config {disable_file = fifo}, {transport = tr})
  local t0 = clock()
  T.eq(main.submit(T.job_desc(), 1000), "disabled", "present")
  T.ok(clock() - t0 < 0.1, string.format("did not wait for a writer (%.3f s)", clock() - t0))
  T.eq(tr.calls, 0, "daemon not asked")
  local without_posix = require "harp.switch".checker(nil)
  t0 = clock()
  T.eq(without_posix(fifo), true, "present without lua-posix")
  T.ok(clock() - t0 < 0.1, string.format("without lua-posix, no wait either (%.3f s)", clock() - t0))
  T.eq(without_posix(dir .. "/none"), false, "absent without lua-posix")
  T.eq(without_posix(dir), true, "a directory is there without lua-posix")
  T.rmdir(dir)
end)

local function encoded(job_desc, part_list)
  local r = require("harp.request").build(job_desc, 1000, part_list)
  r.submit_time = nil
  return require("harp.pb").encode_request(r)
end

-- The last request sent is `expected` followed by submit_time (field 20, the last one, which varies).
local function sent_as(tr, expected, what)
  T.eq(tr.last.payload:sub(1, #expected), expected, what)
  T.eq(tr.last.payload:byte(#expected + 1), 160, what .. ": then field 20")
end

T.test("a job without a partition is sent with the default partition of part_list", function()
  local tr = fake(W.decision {mode = "off"})
  main.configure(config(), {transport = tr})
  local jd = T.job_desc {partition = T.NIL}
  T.eq(main.submit(jd, 1000, T.part_list({"debug", "batch"}, "batch")), "unchanged", "status")
  sent_as(tr, encoded(T.job_desc()), "sent as if -p batch")
  T.same(jd, T.job_desc {partition = T.NIL}, "job_desc not modified")
  -- an explicit partition is sent as given
  main.submit(T.job_desc {partition = "debug"}, 1000, T.part_list({"debug", "batch"}, "batch"))
  sent_as(tr, encoded(T.job_desc {partition = "debug"}), "explicit partition")
end)

T.test("a broken or missing part_list: no partition sent, the job still served", function()
  local tr = fake(REWRITE_TIME)
  main.configure(config(), {transport = tr})
  local no_partition = encoded(T.job_desc {partition = T.NIL})
  local raising = {batch = setmetatable({}, {__index = function() error("part_rec exploded") end})}
  for what, parts in pairs {raising = raising, ["not a table"] = "batch", empty = {}} do
    local jd = T.job_desc {partition = T.NIL}
    T.eq(main.submit(jd, 1000, parts), "rewritten", what)
    sent_as(tr, no_partition, what .. ": no partition")
    T.eq(jd.time_limit, 60, what .. ": decision applied")
  end
  local jd = T.job_desc {partition = T.NIL}
  T.eq(main.submit(jd, 1000), "rewritten", "no part_list (two-argument call)")
  sent_as(tr, no_partition, "nil part_list: no partition")
  T.eq(#T.logs.error, 0, "nothing logged as an error")
end)

T.test("an opted-out job never reaches the daemon and keeps no forged tokens", function()
  local tr = fake(REWRITE_TIME)
  main.configure(config(), {transport = tr})
  local jd = T.job_desc {comment = "nightly harp:off", admin_comment = "harp:extend,t!=1,t0=9999"}
  T.eq(main.submit(jd, 1000), "opted_out", "status")
  T.eq(tr.calls, 0, "no call")
  T.eq(jd.time_limit, 120, "time kept")
  T.eq(jd.admin_comment, "", "a user's own harp token is still stripped")
end)

T.test("log lines escape control characters: a job name cannot forge lines", function()
  local log = require "harp.log"
  T.eq(log.escape("a\nb\rc\td\\e\1f\127"), "a\\nb\\rc\\td\\\\e\\x01f\\x7f", "escaped")
  main.configure(config(), {transport = fake(REWRITE_TIME)})
  local jd = T.job_desc {name = "x\nslurmctld: forged line", comment = "harp:off"}
  main.submit(jd, 1000)
  main.configure(config(), {transport = fake(REWRITE_TIME)})
  main.submit(T.job_desc {name = "x\nforged"}, 1000)
  for _, level in ipairs {"info", "error", "debug"} do
    for _, line in ipairs(T.logs[level] or {}) do
      T.ok(not line:find("\n"), "one line: " .. line)
    end
  end
  T.ok(T.logged("info", "x\\nforged"), "the name is shown escaped")
end)

T.test("a decision not carried out as sent is logged at info, with no note of a change not made", function()
  -- At SlurmctldDebug=info the debug line is not written: a daemon's slip went unseen there.
  local cases = {
    {"harp:rewrite,t!=60,t0=120,v=m", "ignored malformed annotation", "another mode's tag"},
    {"harp:extend,t!=60,t0=120,g=2,v=m", "no tag harp guard could extend the job by", "a tag the guard does not read"},
    {"harp:extend,t!=60,v=m", "no tag harp guard could extend the job by", "no t0"},
  }
  for _, case in ipairs(cases) do
    T.fake_slurm()
    local reply = W.decision {targets = {{target = 1, action = 2, new_value = 60, model_version = "m"}},
      user_message = "harp: lowered time from 02:00:00 to 01:00:00.", annotation = case[1], mode = "extend"}
    main.configure(config(), {transport = fake(reply)})
    local jd = T.job_desc()
    T.eq(main.submit(jd, 1000), "unchanged", case[3])
    T.eq(jd.time_limit, 120, case[3] .. ": limit kept")
    local line = T.logged("info", case[2])
    T.ok(line, case[3] .. ": at info: " .. tostring(T.logs.debug[1]))
    T.ok(not line:find("->", 1, true), case[3] .. ": no note of a cut not made: " .. line)
    T.eq(#T.logs.user, 0, case[3] .. ": nothing said to the user")
  end
  -- an action its mode does not carry out
  T.fake_slurm()
  local reply = W.decision {targets = {{target = 2, action = 2, new_value = 2000, model_version = "m"}},
    annotation = "harp:extend,m!=2000,m0=4000,v=m", mode = "extend"}
  main.configure(config(), {transport = fake(reply)})
  T.eq(main.submit(T.job_desc(), 1000), "unchanged", "ignored action")
  T.ok(T.logged("info", "ignored action 2 in mode extend"), "at info: " .. tostring(T.logs.debug[1]))
  -- a decision carried out that changes nothing stays at debug
  T.fake_slurm()
  reply = W.decision {targets = {{target = 1, action = 1, model_version = "m"}},
    annotation = "harp:shadow,t=60,v=m", mode = "shadow"}
  main.configure(config(), {transport = fake(reply)})
  T.eq(main.submit(T.job_desc(), 1000), "unchanged", "shadow")
  T.eq(#T.logs.info, 0, "shadow: nothing at info")
  T.eq(#T.logs.debug, 1, "shadow: one debug line")
end)

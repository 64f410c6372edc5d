local T = ...

local load_entry, fresh = T.load_entry, T.fresh

local function copy_entry(dir, config_text)
  local src = assert(io.open(T.root .. "/plugin/job_submit.lua")):read("*a")
  T.write(dir .. "/job_submit.lua", src)
  if config_text then T.write(dir .. "/harp_plugin.lua", config_text) end
end

T.test("only the two slurm functions become globals", function()
  fresh(function()
    local env = load_entry(T.root .. "/plugin/job_submit.lua")
    local names = {}
    for k in pairs(env) do names[#names + 1] = k end
    table.sort(names)
    T.eq(table.concat(names, ","), "slurm_job_modify,slurm_job_submit", "globals")
    T.ok(T.logged("info", "loaded from"), "load logged")
  end)
end)

T.test("harp/ next to the script is found without configuration", function()
  fresh(function()
    local env = load_entry(T.root .. "/plugin/job_submit.lua")
    T.ok(package.path:find(T.root .. "/plugin/?.lua", 1, true), "own directory on package.path")
    T.eq(#T.logs.error, 0, "no errors: " .. tostring(T.logs.error[1]))
    local jd = T.job_desc()
    T.eq(env.slurm_job_submit(jd, {}, 1000), slurm.SUCCESS, "success")
    T.eq(env.slurm_job_modify(jd, {}, {}, 1000), slurm.SUCCESS, "modify")
  end)
end)

T.test("config file is read; bad values are logged and defaults kept", function()
  local dir = T.tmpdir()
  fresh(function()
    copy_entry(dir, string.format([[
      return {
        lib_dir = %q, socket = %q, deadline_ms = "fast", breaker_seconds = 5,
        disable_file = %q, log_prefix = "harp-test", colour = "blue",
      }]], T.root .. "/plugin", dir .. "/none.sock", dir .. "/off"))
    local env = load_entry(dir .. "/job_submit.lua")
    T.ok(T.logged("error", 'bad value fast for "deadline_ms", keeping 50'), "bad value logged")
    T.ok(T.logged("error", 'unknown key "colour"'), "unknown key logged")
    local loaded = "harp-test: loaded from " .. T.root .. "/plugin (socket " .. dir .. "/none.sock, deadline 50 ms)"
    T.ok(T.logged("info", loaded),
      "config applied: " .. tostring(T.logs.info[1]))
    local jd = T.job_desc()
    T.eq(env.slurm_job_submit(jd, {}, 1000), slurm.SUCCESS, "success with no daemon")
    T.same(jd, T.job_desc(), "unchanged")
    T.ok(T.logged("error", "harp-test: daemon call failed"), "failure logged with prefix")
    -- disable file
    T.write(dir .. "/off", "")
    T.logs.info = {}
    T.eq(env.slurm_job_submit(T.job_desc(), {}, 1000), slurm.SUCCESS, "success")
    T.ok(T.logged("info", "disabled by " .. dir .. "/off"), "disabled")
  end)
  T.rmdir(dir)
end)

T.test("deadline_ms is taken from 1 to 1000 ms, refused outside", function()
  local dir = T.tmpdir()
  for _, case in ipairs {{1, 1}, {1000, 1000}, {0, 50}, {1001, 50}, {-5, 50}} do
    local given, kept = case[1], case[2]
    fresh(function()
      T.fake_slurm()
      copy_entry(dir, string.format("return { lib_dir = %q, deadline_ms = %d }", T.root .. "/plugin", given))
      load_entry(dir .. "/job_submit.lua")
      T.ok(T.logged("info", "deadline " .. kept .. " ms)"), given .. ": " .. tostring(T.logs.info[1]))
      local refused = T.logged("error", "bad value " .. given .. ' for "deadline_ms", keeping 50')
      T.ok((given ~= kept) == (refused ~= nil), given .. " refused: " .. tostring(refused))
    end)
  end
  T.rmdir(dir)
end)

T.test("the shipped harp_plugin.lua.example loads without a complaint", function()
  local dir = T.tmpdir()
  fresh(function()
    T.fake_slurm()
    local example = assert(io.open(T.root .. "/plugin/harp_plugin.lua.example")):read("*a")
    local here, n = example:gsub('"/usr/share/slurm%-harp/lua"', string.format("%q", T.root .. "/plugin"))
    T.eq(n, 1, "the example names lib_dir once")
    copy_entry(dir, here)
    load_entry(dir .. "/job_submit.lua")
    T.eq(#T.logs.error, 0, "no error: " .. tostring(T.logs.error[1]))
    local applied = "harp: loaded from " .. T.root .. "/plugin (socket /run/slurm-harp/harp.sock, deadline 50 ms)"
    T.ok(T.logged("info", applied), "its values applied: " .. tostring(T.logs.info[1]))
  end)
  T.rmdir(dir)
end)

T.test("broken config file: defaults, logged", function()
  local dir = T.tmpdir()
  fresh(function()
    copy_entry(dir, "return {")
    load_entry(dir .. "/job_submit.lua")
    T.ok(T.logged("error", "cannot load " .. dir .. "/harp_plugin.lua"), "syntax error logged")
  end)
  fresh(function()
    copy_entry(dir, "os.exit(1)")
    load_entry(dir .. "/job_submit.lua")
    T.ok(T.logged("error", "must return a table"), "sandboxed: no os access")
  end)
  T.rmdir(dir)
end)

T.test("missing modules: pass-through, SUCCESS, logged", function()
  local dir = T.tmpdir()
  fresh(function()
    copy_entry(dir, string.format("return {lib_dir = %q}", dir .. "/nowhere"))
    local env = load_entry(dir .. "/job_submit.lua")
    T.ok(T.logged("error", "cannot load harp modules from " .. dir .. "/nowhere"), "logged")
    -- require's error lists each path it tried, one a line: the log line is one line
    T.ok(not T.logs.error[#T.logs.error]:find("[\r\n]"), "one line: " .. T.logs.error[#T.logs.error])
    local jd = T.job_desc {admin_comment = "x"}
    T.eq(env.slurm_job_submit(jd, {}, 1000), slurm.SUCCESS, "success")
    T.same(jd, T.job_desc {admin_comment = "x"}, "unchanged")
  end)
  T.rmdir(dir)
end)

T.test("an error escaping harp.main still returns SUCCESS", function()
  fresh(function()
    local env = load_entry(T.root .. "/plugin/job_submit.lua")
    local main = package.loaded["harp.main"]
    local real = main.submit
    main.submit = function() error("escaped") end
    local ok, rc = pcall(env.slurm_job_submit, T.job_desc(), {}, 1000)
    main.submit = real
    T.ok(ok, "did not raise")
    T.eq(rc, slurm.SUCCESS, "success")
    T.ok(T.logged("error", "escaped"), "logged")
  end)
end)

T.test("the documented site embedding loads harp and fails open", function()
  fresh(function()
    local dir = T.tmpdir()
    local src = assert(io.open(T.root .. "/plugin/examples/site_job_submit.lua")):read("*a")
    local lib = T.root .. "/plugin"
    src = src:gsub('"/usr/share/slurm%-harp/lua"', function() return string.format("%q", lib) end)
    src = src:gsub('"/run/slurm%-harp/harp%.sock"', function() return string.format("%q", dir .. "/none.sock") end)
    T.write(dir .. "/job_submit.lua", src)
    local env = load_entry(dir .. "/job_submit.lua")
    local jd = T.job_desc {admin_comment = "site harp:rewrite,t!=1"}
    local limit = jd.time_limit
    T.eq(env.slurm_job_submit(jd, {}, 1000), slurm.SUCCESS, "accepted")
    T.eq(jd.time_limit, limit, "unchanged when the daemon is unreachable")
    T.eq(jd.admin_comment, "site", "a user's forged tag is stripped")
    T.ok(T.logged("error", "daemon call failed"), "failure logged")
  end)
end)

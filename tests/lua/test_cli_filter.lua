local T = ...
-- plugin/cli_filter.lua loaded as cli_filter/lua loads it: off unless harp_advice.lua enables it, and
-- every function returns slurm.SUCCESS whatever happens.
local load_entry, fresh = T.load_entry, T.fresh

local SBATCH = {type = "sbatch", ["job-name"] = "relax", ntasks = "1", ["cpus-per-task"] = "0", nodes = "1-0",
  argv = {}}

-- cli_filter.lua copied into a fresh directory (as beside slurm.conf), with harp_advice.lua if given.
local function site(config_text)
  local dir = T.tmpdir()
  T.write(dir .. "/cli_filter.lua", assert(io.open(T.root .. "/plugin/cli_filter.lua")):read("*a"))
  if config_text then T.write(dir .. "/harp_advice.lua", config_text) end
  return dir
end

local function enabled(extra)
  return 'return { enabled = true, lib_dir = "' .. T.root .. '/plugin", socket = "/nonexistent/advice.sock"'
    .. (extra or "") .. ' }\n'
end

local function all_succeed(env, options)
  T.eq(env.slurm_cli_setup_defaults(options, true), slurm.SUCCESS, "setup_defaults early")
  T.eq(env.slurm_cli_setup_defaults(options, false), slurm.SUCCESS, "setup_defaults")
  T.eq(env.slurm_cli_pre_submit(options, 0), slurm.SUCCESS, "pre_submit")
  T.eq(env.slurm_cli_post_submit(0, 42, 4294967294), slurm.SUCCESS, "post_submit")
end

T.test("only the three cli_filter functions become globals", function()
  fresh(function()
    local env = load_entry(T.root .. "/plugin/cli_filter.lua")
    local names = {}
    for k in pairs(env) do names[#names + 1] = k end
    table.sort(names)
    T.eq(table.concat(names, ","), "slurm_cli_post_submit,slurm_cli_pre_submit,slurm_cli_setup_defaults", "globals")
  end)
end)

T.test("off by default: without harp_advice.lua nothing is loaded", function()
  fresh(function()
    local dir = site(nil)
    local env = load_entry(dir .. "/cli_filter.lua")
    all_succeed(env, SBATCH)
    T.rmdir(dir)
    T.eq(package.loaded["harp.advice_hook"], nil, "hook not loaded")
  end)
  fresh(function()
    local dir = site(enabled():gsub("enabled = true", "enabled = false"))
    all_succeed(load_entry(dir .. "/cli_filter.lua"), SBATCH)
    T.rmdir(dir)
    T.eq(package.loaded["harp.advice_hook"], nil, "enabled = false")
  end)
end)

T.test("enabled with the daemon absent: the hook runs, fails silent, sbatch goes on", function()
  fresh(function()
    local dir = site(enabled(", deadline_ms = 100"))
    local env = load_entry(dir .. "/cli_filter.lua")
    all_succeed(env, SBATCH)
    T.rmdir(dir)
    T.ok(package.loaded["harp.advice_hook"], "hook loaded")
  end)
end)

T.test("the shipped harp_advice.lua.example enables the hook without a complaint", function()
  local example = assert(io.open(T.root .. "/plugin/harp_advice.lua.example")):read("*a")
  local here, n = example:gsub('"/usr/share/slurm%-harp/lua"', string.format("%q", T.root .. "/plugin"))
  T.eq(n, 1, "the example names lib_dir once")
  local said, getenv, stderr = {}, os.getenv, io.stderr
  local function debug_env(name) if name == "HARP_ADVICE_DEBUG" then return "1" end return getenv(name) end
  os.getenv = debug_env -- luacheck: ignore 122
  io.stderr = {write = function(_, ...) said[#said + 1] = table.concat({...}) end} -- luacheck: ignore 122
  local ok, err = pcall(fresh, function()
    local dir = site(here)
    all_succeed(load_entry(dir .. "/cli_filter.lua"), SBATCH)
    T.rmdir(dir)
    T.ok(package.loaded["harp.advice_hook"], "enabled: the hook loaded")
  end)
  os.getenv, io.stderr = getenv, stderr -- luacheck: ignore 122
  assert(ok, err)
  T.ok(#said > 0, "HARP_ADVICE_DEBUG lines captured")
  for _, line in ipairs(said) do T.ok(not line:find("harp_advice.lua", 1, true), line) end
end)

T.test("enabled alone: the advice socket and a 300 ms deadline, as docs/advice.md says", function()
  fresh(function()
    local dir = site("return { enabled = true }")
    local given
    package.loaded["harp.advice_hook"] = {configure = function(c) given = c end, pre_submit = function() end}
    all_succeed(load_entry(dir .. "/cli_filter.lua"), SBATCH)
    T.rmdir(dir)
    T.ok(given, "the hook was configured")
    T.eq(given.socket, "/run/slurm-harp/advice.sock", "socket")
    T.eq(given.deadline_ms, 300, "deadline_ms")
  end)
end)

T.test("the lines docs/advice.md gives a site's own cli_filter.lua configure the hook", function()
  local doc = assert(io.open(T.root .. "/docs/advice.md")):read("*a")
  local lines = assert(doc:match("```lua\n(.-)```"), "docs/advice.md shows the lines")
  local here, n = lines:gsub("/usr/share/slurm%-harp/lua/", T.root .. "/plugin/")
  T.eq(n, 1, "the lines name the modules' directory once")
  fresh(function()
    local chunk = assert(loadstring("local options, pack_offset = ...\n" .. here .. "\nreturn ok, harp"))
    local ok, harp = chunk(SBATCH, 0)
    T.eq(ok, true, "the hook loaded and configured")
    local status = harp.pre_submit(SBATCH, 0)
    T.ok(status ~= "not_configured" and status ~= "not_sbatch", "an sbatch is advised: " .. tostring(status))
  end)
end)

T.test("srun and salloc never load the hook", function()
  fresh(function()
    local dir = site(enabled())
    local env = load_entry(dir .. "/cli_filter.lua")
    all_succeed(env, {type = "srun"})
    all_succeed(env, setmetatable({}, {__index = function() error("no such option") end}))
    T.rmdir(dir)
    T.eq(package.loaded["harp.advice_hook"], nil, "not loaded")
  end)
end)

T.test("broken settings, missing modules, a raising options table: still SUCCESS", function()
  for _, text in ipairs {"return {", "error('x')", "return 42", enabled(', deadline_ms = "fast", bogus = 1'),
    'return { enabled = true, lib_dir = "/nonexistent" }'} do
    fresh(function()
      local dir = site(text)
      all_succeed(load_entry(dir .. "/cli_filter.lua"), SBATCH)
      T.rmdir(dir)
    end)
  end
  fresh(function()
    local dir = site(enabled())
    local env = load_entry(dir .. "/cli_filter.lua")
    local hostile = setmetatable({}, {__index = function(_, k)
      if k == "type" then return "sbatch" end
      error("boom")
    end})
    all_succeed(env, hostile)
    T.rmdir(dir)
  end)
end)

T.test("without a global slurm table the functions return 0", function()
  fresh(function()
    local env = load_entry(T.root .. "/plugin/cli_filter.lua")
    local saved = slurm
    slurm = nil -- luacheck: ignore 111
    local ok, rc = pcall(env.slurm_cli_pre_submit, SBATCH, 0)
    slurm = saved -- luacheck: ignore 111
    T.ok(ok, "no error")
    T.eq(rc, 0, "0")
  end)
end)

-- Runs every tests/lua/test_*.lua under plain lua5.1 and prints "N passed, M failed".
-- Usage: lua5.1 tests/lua/run.lua [name-filter]
local here = (arg and arg[0] or "run.lua"):match("^(.*)/[^/]*$") or "."
local root = here .. "/../.."
package.path = here .. "/?.lua;" .. root .. "/plugin/?.lua;" .. package.path

local T = require "harness"
T.root, T.here = root, here

local filter = arg[1]
local files = {}
local p = io.popen('ls "' .. here .. '"/test_*.lua 2>/dev/null')
for f in p:lines() do files[#files + 1] = f end
p:close()
if #files == 0 then
  io.stderr:write("no test files found in " .. here .. "\n")
  os.exit(2)
end

for _, f in ipairs(files) do
  T.current_file = f
  local chunk, err = loadfile(f)
  if not chunk then
    T.record(f, "load", false, err)
  else
    local ok, lerr = pcall(chunk, T, f)
    if not ok then T.record(f, "load", false, lerr) end
  end
end
local passed, failed = T.run_all(filter)
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)

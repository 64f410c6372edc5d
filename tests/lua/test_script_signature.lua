local T = ...
-- harp.script_signature: the cli_filter hook's script signature, which must equal the Python twin's
-- (daemon/slurm_harp/advice/script.py; tests/unit/test_lua_plugin.py checks the two against each other).
local signature = require "harp.script_signature"

T.test("script signature covers #SBATCH lines only", function()
  local sig = signature.of
  local a = sig("#!/bin/bash\n#SBATCH -t 10\n#SBATCH --mem=1G\necho one\n")
  local b = sig("#!/bin/sh\n# comment\n\n#SBATCH -t 10   \r\n#SBATCH --mem=1G\npython other.py\n#SBATCH --ignored\n")
  T.eq(a, b, "body, shebang, comments, trailing whitespace and directives after the first command do not count")
  T.ok(a ~= sig("#!/bin/bash\n#SBATCH -t 11\n#SBATCH --mem=1G\necho\n"), "directives count")
  T.eq(a, signature.fnv1a64("#SBATCH -t 10\n#SBATCH --mem=1G"), "definition")
  T.eq(sig("#!/bin/bash\necho hi\n"), nil, "no directives")
  T.eq(sig(nil), nil, "no script")
  -- FNV-1a 64 reference vectors
  T.eq(signature.fnv1a64(""), "cbf29ce484222325", "empty")
  T.eq(signature.fnv1a64("a"), "af63dc4c8601ec8c", "a")
  T.eq(signature.fnv1a64("foobar"), "85944171f73967e8", "foobar")
end)

T.test("the scan's bounds: 64 KiB, 1024 lines, 2 KiB hashed", function()
  local sig = signature.of
  T.eq(signature.MAX_SCAN, 65536, "bytes scanned")
  T.eq(signature.MAX_SCAN_LINES, 1024, "lines scanned")
  T.eq(signature.MAX_HASHED, 2048, "bytes hashed")
  T.eq(signature.MAX_LINE, 1024, "bytes of a directive line kept")
  T.eq(signature.MAX_LINES, 256, "directive lines kept")
  local comment = "#" .. string.rep("c", 999) .. "\n" -- 1000 bytes
  T.ok(sig(string.rep(comment, 65) .. "#SBATCH -t 5\n") ~= nil, "a directive starting within 64 KiB")
  T.eq(sig(string.rep(comment, 66) .. "#SBATCH -t 5\n"), nil, "a directive past 64 KiB is not looked at")
  T.ok(sig(string.rep("\n", 1023) .. "#SBATCH -t 5\n") ~= nil, "a directive on line 1024")
  T.eq(sig(string.rep("\n", 1024) .. "#SBATCH -t 5\n"), nil, "a directive on line 1025 is not looked at")
  local head = string.rep("#SBATCH --comment=" .. string.rep("h", 100) .. "\n", 20) -- 2,380 bytes
  local joined = (head .. "#SBATCH -t 5"):gsub("\n$", "")
  T.eq(sig(head .. "#SBATCH -t 5\n"), signature.fnv1a64(joined:sub(1, 2048)), "the first 2048 bytes hashed")
  T.eq(sig(head .. "#SBATCH -t 5\n"), sig(head .. "#SBATCH -t 6\n"), "a difference past them does not count")
end)

-- FNV-1a 64 as defined, on 64-bit integers spelled as two 32-bit limbs with plain arithmetic: the
-- plugin's arithmetic is written for speed, this for reading.
local function fnv_reference(s)
  local function xor8(a, b)
    local x, bit = 0, 1
    for _ = 1, 8 do
      if a % 2 ~= b % 2 then x = x + bit end
      a, b, bit = math.floor(a / 2), math.floor(b / 2), bit * 2
    end
    return x
  end
  local lo, hi = 0x84222325, 0xcbf29ce4
  for i = 1, #s do
    lo = lo - lo % 256 + xor8(lo % 256, s:byte(i))
    -- (hi * 2^32 + lo) * (2^40 + 0x1b3) mod 2^64
    local r = lo * 0x1b3
    hi = (hi * 0x1b3 + math.floor(r / 2^32) + (lo % 2^24) * 2^8) % 2^32
    lo = r % 2^32
  end
  return string.format("%08x%08x", hi, lo)
end

T.test("FNV-1a 64 matches its definition on random bytes", function()
  math.randomseed(23)
  for n = 1, 500 do
    local bytes = {}
    for k = 1, n % 97 do bytes[k] = string.char(math.random(0, 255)) end
    local s = table.concat(bytes)
    T.eq(signature.fnv1a64(s), fnv_reference(s), "random string " .. n)
  end
end)

-- Hostile 10 MB scripts: the signature is made within a few milliseconds whatever the script.
local function hostile_scripts()
  local mb10 = 10 * 1048576
  local line = "#SBATCH --comment=" .. string.rep("z", 1000)
  return {
    long_directives = "#!/bin/bash\n" .. string.rep(line .. "\n", math.floor(mb10 / #line)),
    short_directives = "#!/bin/bash\n" .. string.rep("#SBATCH -x\n", math.floor(mb10 / 10)),
    comment_lines = "#!/bin/bash\n" .. string.rep("#\n", math.floor(mb10 / 2)),
    blank_lines = string.rep("\n", mb10),
    one_line = "#SBATCH " .. string.rep("w", mb10),
  }
end

T.test("a hostile 10 MB script costs milliseconds, not seconds", function()
  for name, script in pairs(hostile_scripts()) do
    local t0 = os.clock()
    local sig = signature.of(script)
    local ms = (os.clock() - t0) * 1000
    T.ok(ms < 20, name .. ": " .. string.format("%.1f ms", ms))
    T.ok(sig == nil or #sig == 16, name .. ": a signature or none")
  end
end)

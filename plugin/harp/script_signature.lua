-- The script signature: hex FNV-1a 64 of a batch script's #SBATCH header, which matches a job to the
-- user's earlier runs of the same script.
-- Used by the cli_filter advice hook only, through harp.sbatch_request (job_submit sends none: sacct
-- records no script, so no model has it). Its Python twin is daemon/slurm_harp/advice/script.py's
-- script_signature (`harp advise --script`): the two must give equal values for every script, bounds
-- included (tests/unit/test_lua_plugin.py, tests/unit/test_advice_script.py).

local floor, min = math.floor, math.min
local type = type
local match, sub, byte, find, format = string.match, string.sub, string.byte, string.find, string.format
local concat = table.concat

local M = {}

-- Bound the scan and the hash so that no script costs more than a few milliseconds (a real #SBATCH
-- header is a few hundred bytes).
local MAX_SCAN = 65536 -- bytes of script looked at, at most
local MAX_SCAN_LINES = 1024 -- lines looked at, at most (blank and comment lines included)
local MAX_LINE = 1024 -- bytes of a directive line kept
local MAX_LINES = 256 -- directive lines kept, at most
local MAX_HASHED = 2048 -- bytes of directives hashed, at most
M.MAX_SCAN, M.MAX_SCAN_LINES, M.MAX_LINE, M.MAX_LINES, M.MAX_HASHED =
  MAX_SCAN, MAX_SCAN_LINES, MAX_LINE, MAX_LINES, MAX_HASHED

-- xor of two 4-bit values, as a 16x16 table (Lua 5.1 has no bit operations)
local XOR4 = {}
for a = 0, 15 do
  for b = 0, 15 do
    local x, bit, p, q = 0, 1, a, b
    for _ = 1, 4 do
      if p % 2 ~= q % 2 then x = x + bit end
      p, q, bit = floor(p / 2), floor(q / 2), bit * 2
    end
    XOR4[a * 16 + b] = x
  end
end

-- FNV-1a 64 with two 32-bit limbs; every intermediate stays below 2^53.
-- h * prime mod 2^64, prime = 2^40 + 0x1b3: lo' = lo * 0x1b3 mod 2^32, and the high limb gets the
-- carry, hi * 0x1b3 and the low 24 bits of lo shifted by 8 (the 2^40 term).
-- It runs for every byte hashed: whole divisions are written as (x - x % d) / d, which is exact here
-- and spares a call to math.floor.
local TWO32, TWO24 = 4294967296, 16777216
local function fnv1a64(s)
  local lo, hi = 0x84222325, 0xcbf29ce4 -- offset basis 0xcbf29ce484222325
  for i = 1, #s do
    local b = byte(s, i)
    local low = lo % 256
    local low4, b4 = low % 16, b % 16
    lo = lo - low + XOR4[low - low4 + (b - b4) / 16] * 16 + XOR4[low4 * 16 + b4]
    local r = lo * 0x1b3
    local r_lo = r % TWO32
    hi = (hi * 0x1b3 + (r - r_lo) / TWO32 + (lo % TWO24) * 256) % TWO32
    lo = r_lo
  end
  return format("%08x%08x", hi, lo)
end
M.fnv1a64 = fnv1a64

-- Hex FNV-1a 64 of the script's "#SBATCH" lines, each cut to MAX_LINE bytes then stripped of trailing
-- whitespace, at most MAX_LINES of them within the first MAX_SCAN bytes and MAX_SCAN_LINES lines,
-- joined by "\n" and cut to MAX_HASHED bytes; nil for no script or one without directives.
-- Like sbatch, the scan stops at the first line that is neither blank nor a "#" comment, which also
-- bounds the work on huge scripts. Only directives are hashed: nothing of the body is sent.
function M.of(script)
  if type(script) ~= "string" or script == "" then return nil end
  local lines, n, pos, len, seen = {}, 0, 1, #script, 0
  while pos <= len and pos <= MAX_SCAN and seen < MAX_SCAN_LINES do
    seen = seen + 1
    local e = find(script, "\n", pos, true) or (len + 1)
    -- nothing past MAX_SCAN + 1 bytes, as the Python twin (advice/script.py) reads the script
    local line = sub(script, pos, min(e - 1, pos + MAX_LINE - 1, MAX_SCAN + 1))
    if sub(line, 1, 7) == "#SBATCH" then
      n = n + 1
      lines[n] = match(line, "^(.*%S)") or "" -- linear, unlike "(.-)%s*$"
      if n >= MAX_LINES then break end
    elseif not find(line, "^%s*$") and not find(line, "^%s*#") then
      break
    end
    pos = e + 1
  end
  if n == 0 then return nil end
  return fnv1a64(sub(concat(lines, "\n"), 1, MAX_HASHED))
end

return M

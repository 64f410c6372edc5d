-- job_desc (as slurmctld 22.05 exposes it to Lua) -> SubmitRequest table for pb.encode_request.
-- A Slurm sentinel (NO_VAL, INFINITE, NO_VAL16, NO_VAL64) or nil means "not given": the field is left out.

local floor, os_time = math.floor, os.time
local type, tonumber, pcall = type, tonumber, pcall
local sub, byte, find = string.sub, string.byte, string.find
local concat = table.concat
local partitions = require "harp.partitions"
local gpus = require "harp.gpus"

local M = {}

local NO_VAL16 = 65534        -- also INFINITE16 = 65535
local NO_VAL = 4294967294     -- also INFINITE = 4294967295
local MAX_EXACT = 9007199254740992 -- NO_VAL64 and the MEM_PER_CPU flag bit are far above this
-- The QOS slurmctld gives a job that names none where its association has no default QOS, its own or
-- inherited (job_desc.default_qos answers nil): "normal", unless the association allows one QOS only,
-- which job_desc does not show (assoc_mgr_get_default_qos_info, Slurm 22.05).
M.FALLBACK_QOS = "normal"
M.MAX_STRING = 255 -- bytes, as slurmdbd keeps; the daemon's slurm_harp.core.text.MAX_TEXT_BYTES (test_lua_text.py)

-- A count below `limit` (the field's sentinel), integral and >= `min`; anything else is "not given".
local function count(v, limit, least)
  v = tonumber(v)
  if v == nil or v ~= v or v < (least or 0) or v >= limit or floor(v) ~= v then return nil end
  return v
end
M.count16 = function(v, least) return count(v, NO_VAL16, least) end
M.count32 = function(v, least) return count(v, NO_VAL, least) end
M.count64 = function(v, least) return count(v, MAX_EXACT, least) end

-- Whether a 32-bit count field was left out: nil or a Slurm sentinel. A value that is there but no
-- count (fractional, negative, text) is neither: harp must not write that field over it.
function M.absent32(v)
  if v == nil then return true end
  local n = tonumber(v)
  return n ~= nil and n >= NO_VAL
end

-- The length and the range of the second byte of a character led by byte `c` (0 if no character
-- starts with it): the narrower ranges rule out overlong forms, surrogates and code points past U+10FFFF.
local function lead(c)
  if c < 0x80 then return 1 end
  if c >= 0xC2 and c <= 0xDF then return 2, 0x80, 0xBF end
  if c == 0xE0 then return 3, 0xA0, 0xBF end
  if c == 0xED then return 3, 0x80, 0x9F end
  if c >= 0xE1 and c <= 0xEF then return 3, 0x80, 0xBF end
  if c == 0xF0 then return 4, 0x90, 0xBF end
  if c >= 0xF1 and c <= 0xF3 then return 4, 0x80, 0xBF end
  if c == 0xF4 then return 4, 0x80, 0x8F end
  return 0
end

-- The length of the character that starts at byte i; nil if no whole character does.
local function char_len(s, i)
  local size, lo, hi = lead(byte(s, i))
  for j = 1, size - 1 do
    local b = byte(s, i + j)
    if b == nil or b < lo or b > hi then return nil end
    lo, hi = 0x80, 0xBF
  end
  return size > 0 and size or nil
end

-- `s` as UTF-8 text of at most `max` bytes, by the rule the daemon applies to every string of a job
-- (slurm_harp.core.text): each byte of an invalid sequence (a lone continuation byte, an overlong
-- form, a surrogate, a code point past U+10FFFF, a truncated character) becomes "?", and the text is cut
-- after its last whole character that ends within `max` bytes. "?" and not U+FFFD: slurmdbd's MariaDB
-- stores each such byte of a name as "?", so that is what sacct shows and the job store keeps
-- (tests/e2e/test_hostile.py); a name must key the same history at submit time as in the store.
-- A protobuf string must be UTF-8: one user's odd job name must not make the daemon refuse the call.
-- Only the first `max` + 3 bytes are ever looked at (the text is as long as the bytes it was read from).
function M.utf8(s, max)
  local head = sub(s, 1, max)
  -- All ASCII (the usual case): nothing to replace, and one scan in C instead of a loop per byte.
  if not find(head, "[\128-\255]") then return head end
  local out, k, i, copied = {}, 0, 1, 1 -- copied: the first byte not yet in `out`
  while i <= max and i <= #s do
    local len = char_len(s, i)
    if len == nil then
      out[k + 1], out[k + 2], k = sub(s, copied, i - 1), "?", k + 2
      len, copied = 1, i + 1
    elseif i + len - 1 > max then
      break
    end
    i = i + len
  end
  out[k + 1] = sub(s, copied, i - 1)
  return concat(out)
end

local function text(v)
  if type(v) ~= "string" or v == "" then return nil end
  return M.utf8(v, M.MAX_STRING)
end
M.text = text

-- t[k] under pcall (job_desc reads its fields in C and may raise).
local function index(t, k)
  return t[k]
end

-- The default partition's name in part_list as a request carries it (text), or nil.
function M.default_partition(part_list)
  return text(partitions.default_partition(part_list))
end

-- The job's partitions as slurmctld holds them (a list "a,b" whole, bytes as given); when none was
-- given (nil or ""), the default partition's name in part_list: where Slurm will put the job and what
-- accounting will record. nil when the read of job_desc.partition fails (not "none given") or there
-- is no default. Limits are looked up in part_list by these names; the request carries them as text
-- (cut to MAX_STRING bytes, "?" for bytes that are not UTF-8), which may name no partition there.
-- job_desc is only read.
function M.partition_names(job_desc, part_list)
  local ok, v = pcall(index, job_desc, "partition")
  if not ok then return nil end
  if v == nil or v == "" then return partitions.default_partition(part_list) end
  return v
end

-- Whether job_desc's time limit was left out (NO_VAL): slurmctld then gives the job its partition's
-- default. INFINITE is a limit a user asked for (--time=UNLIMITED), and a value that is there but no
-- count is neither: no default is sent for those.
local function no_limit_given(v)
  return v == nil or tonumber(v) == NO_VAL
end

-- Build the request. Reads every field under pcall: a field access error drops that field only.
function M.build(job_desc, submit_uid, part_list)
  local function get(k)
    local ok, v = pcall(index, job_desc, k)
    if ok then return v end
    return nil
  end
  local tres = text(get("tres_per_node"))
  local array = get("array_inx")
  local uid = count(get("user_id"), NO_VAL) or count(submit_uid, NO_VAL)
  local limit_read, limit = pcall(index, job_desc, "time_limit")
  local names = M.partition_names(job_desc, part_list)
  return {
    user_name = text(get("user_name")),
    user_id = uid,
    -- Without -A or --qos, the user's default account and its default QOS, which slurmctld gives the
    -- job and accounting records (what training learns from; per-account rules match them).
    account = text(get("account")) or text(get("default_account")),
    partition = text(names),
    qos = text(get("qos")) or text(get("default_qos")) or M.FALLBACK_QOS,
    job_name = text(get("name")),
    work_dir = text(get("work_dir")),
    -- No script_signature: sacct records no script, so no model has it (unknown in every row trained
    -- from sacct: tests/unit/test_sacct.py), and reading job_desc.script copies the whole script into
    -- Lua under slurmctld's locks, then hashing its #SBATCH lines took about 0.1-0.2 ms for a header
    -- of a dozen lines (benchmarks/lua/request_build.lua). The advice hook still sends it
    -- (harp.script_signature).
    time_limit_minutes = limit_read and count(limit, NO_VAL) or nil,
    -- Without --time, the limit slurmctld fills in after this plugin and accounting records: the
    -- features read it as the job's limit, as training does; policy still sees no request of the user's.
    -- A read of time_limit that raises is not "none given": no default then. Looked up by the job's own
    -- names, as MaxTime is (harp.main), not by the request's text.
    default_time_limit_minutes = limit_read and no_limit_given(limit) and partitions.default_time(part_list, names)
      or nil,
    time_min_minutes = count(get("time_min"), NO_VAL),
    -- 0 is "all of a node's memory" (--mem=0, --mem-per-cpu=0): policy lowers no such request, and the
    -- features read that node's memory, as accounting records it
    mem_per_node_mb = count(get("min_mem_per_node"), MAX_EXACT),
    mem_per_cpu_mb = count(get("min_mem_per_cpu"), MAX_EXACT),
    min_cpus = count(get("min_cpus"), NO_VAL),
    cpus_per_task = count(get("cpus_per_task"), NO_VAL16),
    num_tasks = count(get("num_tasks"), NO_VAL),
    min_nodes = count(get("min_nodes"), NO_VAL),
    -- from --gpus, --gpus-per-node, --gpus-per-socket and --gpus-per-task, as accounting counts them
    gpus_per_node = gpus.of_job(get),
    tres_per_node = tres,
    is_array = type(array) == "string" and array ~= "",
    submit_time = os_time(),
  }
end

return M

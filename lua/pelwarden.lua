#!lua name=pelwarden
--[[
pelwarden: atomic Redis Streams consumer-group maintenance.

This file is the whole server side of pelwarden. It is loaded with
FUNCTION LOAD (Redis 7.0+, Valkey 7.2+) and called with FCALL. Where the
FUNCTION command is refused, the Go loader runs the same source through
EVALSHA: it takes the text up to the "@@register" marker near the end and
appends lua/shim.lua, which dispatches on the function name.

Conventions
- Every key a function touches is in KEYS; no key name is ever built from
  ARGV. All keys of one call must hash to one cluster slot: use a hash tag,
  e.g. "{orders}" and "{orders}:dead".
- Function names carry the prefix "pelwarden_" and an API version ("v1").
  A later library keeps every older API's names, so old and new drivers can
  run side by side during a rolling deploy.
- Errors are returned as error replies whose first word is one of the codes
  in ERRORS below. The Go table in errors.go mirrors it; a test fails when
  the two drift apart.
- Times are milliseconds. Booleans in ARGV are "0" or "1".
- ACL: before changing anything, every function checks that the calling
  user may run each command it can need on its keys (see allow below), so a
  user missing one permission gets PWNOPERM naming it, never a half-done
  page.
- Work per call is bounded: a page scans at most COUNT*10 PEL entries
  (like XAUTOCLAIM) and returns at most COUNT entries and MAXBYTES bytes of
  field data.
]]

local LIBRARY_VERSION = '1.4.0'

-- @@errors-begin (parsed by errors_test.go: keep one code per line)
local ERRORS = {
  NOGROUP = 'PWNOGROUP',     -- the stream or the consumer group does not exist
  WRONGTYPE = 'PWWRONGTYPE', -- a key holds a value that is not a stream
  BADARG = 'PWBADARG',       -- an argument is missing or malformed
  BADID = 'PWBADID',         -- a stream id or cursor is malformed
  SERVER = 'PWSERVER',       -- the server refused a command (message attached)
  NOPERM = 'PWNOPERM',       -- the caller's ACL user may not run a command the call needs
  NOLIMIT = 'PWNOLIMIT',     -- the named limit is not set (added in 1.4.0)
}
-- @@errors-end

-- Metadata fields appended to every dead-letter record, after the original
-- fields. META_COUNT is always the last field; its value is the number of
-- metadata field/value pairs (itself included), so the original fields can
-- be recovered exactly by dropping that many pairs from the end.
local F_ORIGINAL_ID = 'pelwarden.original_id'
local F_STREAM = 'pelwarden.stream'
local F_GROUP = 'pelwarden.group'
local F_CONSUMER = 'pelwarden.consumer'
local F_DELIVERIES = 'pelwarden.deliveries'
local F_REASON = 'pelwarden.reason'
local F_ERROR = 'pelwarden.error'
local F_TIME = 'pelwarden.dead_lettered_at'
local F_META_COUNT = 'pelwarden.meta'
-- Added to an entry when it is redriven from a dead-letter stream.
local F_REDRIVES = 'pelwarden.redrives'

local REASON_MAX_DELIVERIES = 'max_deliveries'

local MAX_ERROR_BYTES = 4096
local MAX_REASON_BYTES = 256
local TRUNCATED_MARKER = '...[truncated]'
local MAX_COUNT = 10000
local SCAN_FACTOR = 10
-- Lua 5.1's unpack (and the C stack behind redis.call) takes at most 7999
-- values (LUAI_MAXCSTACK = 8000), so a command built in Lua can carry at
-- most that many arguments. An entry with more field/value elements than
-- fit (about 3,950 fields) can still be claimed (XCLAIM returns it) but can
-- be neither copied to a dead-letter stream nor re-added by redrive: those
-- steps leave it where it is and report it as "too large". The margin keeps
-- clear of the exact limit.
local MAX_CALL_VALUES = 7900
-- The trim function finds each cut with an XRANGE of at most this many
-- entries (plus one), so its memory per step is bounded whatever its limit.
local TRIM_CHUNK = 100

------------------------------------------------------------------------------
-- helpers

local function fail(code, msg)
  return error({err = code .. ' ' .. msg})
end

-- Runs a Redis command and turns its error replies into library codes.
local function call(...)
  local res = redis.pcall(...)
  if type(res) == 'table' and res.err then
    local e = res.err
    if string.find(e, '^NOGROUP') then
      fail(ERRORS.NOGROUP, 'no such consumer group or stream (create the group first, e.g. XGROUP CREATE ... MKSTREAM)')
    elseif string.find(e, '^WRONGTYPE') then
      fail(ERRORS.WRONGTYPE, 'a key holds a value that is not a stream')
    elseif string.find(e, 'Invalid stream ID') or string.find(e, 'invalid start ID') or string.find(e, 'invalid end ID') then
      fail(ERRORS.BADID, 'malformed stream id')
    elseif string.find(e, '^OOM') then
      -- The server is at maxmemory (only reachable under EVALSHA, where
      -- scripts have no flags): keep its own code, as for any command.
      return error({err = e})
    end
    fail(ERRORS.SERVER, (select(1, ...)) .. ': ' .. e)
  end
  return res
end

local function argstr(args, i, name)
  local v = args[i]
  if v == nil then
    fail(ERRORS.BADARG, name .. ' is missing')
  end
  return v
end

local function argint(args, i, name, min, max)
  local s = argstr(args, i, name)
  if not string.find(s, '^%d+$') then
    fail(ERRORS.BADARG, name .. ' must be a non-negative integer, got "' .. string.sub(s, 1, 64) .. '"')
  end
  local n = tonumber(s)
  if n < min or n > max then
    fail(ERRORS.BADARG, name .. ' must be between ' .. min .. ' and ' .. max)
  end
  return n
end

local function argbool(args, i, name)
  local s = argstr(args, i, name)
  if s == '1' then return true end
  if s == '0' then return false end
  fail(ERRORS.BADARG, name .. ' must be 0 or 1')
end

local function argname(args, i, name)
  local s = argstr(args, i, name)
  if s == '' then
    fail(ERRORS.BADARG, name .. ' must not be empty')
  end
  return s
end

-- ACL preflight (redis.acl_check_cmd, Redis 7.0+ and Valkey). Commands run
-- inside a function are checked against the calling user's ACL one by one;
-- a refusal in the middle of a page would leave it half done (a record
-- copied to the dead-letter stream but its entry not acknowledged). So every
-- function first checks each command it can need, with its real keys, and
-- fails with PWNOPERM before any change, naming the command. The keys
-- themselves were checked by the server before the function started (FCALL
-- and EVALSHA need read and write access to every key, FCALL_RO read
-- access), so a refusal here is the command's. Each check is an argument
-- list for acl_check_cmd: command, [subcommand], key, other arguments.
local SUBCOMMANDS = {XINFO = true, XGROUP = true}
local function allow(checks)
  for i = 1, #checks do
    local c = checks[i]
    if not redis.acl_check_cmd(unpack(c)) then
      local name, key = string.lower(c[1]), c[2]
      if SUBCOMMANDS[c[1]] then
        name, key = name .. '|' .. string.lower(c[2]), c[3]
      end
      local on = ''
      if key ~= nil then on = ' on ' .. key end
      fail(ERRORS.NOPERM, 'needs the ' .. name .. ' command' .. on .. ', which this ACL user may not run (grant +' .. name .. ')')
    end
  end
end

-- Stream ids: "ms-seq" (both parts decimal). Used for ids and cursors.
local function checkid(id, name)
  if not string.find(id, '^%d+%-%d+$') then
    fail(ERRORS.BADID, name .. ' must be a stream id like 1700000000000-0, got "' .. string.sub(id, 1, 64) .. '"')
  end
  return id
end

-- Whether id is the largest stream id, 18446744073709551615-18446744073709551615
-- (leading zeros allowed, as the server allows them): nothing comes after
-- it, and "(" .. id is refused by the server.
local UINT64_MAX = '18446744073709551615'
local function ismaxid(id)
  local ms, seq = string.match(id, '^0*(%d+)%-0*(%d+)$')
  return ms == UINT64_MAX and seq == UINT64_MAX
end

-- The key must hold a stream or not exist; returns true when it exists.
local function streamkey(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'stream' then return true end
  if t == 'none' then return false end
  fail(ERRORS.WRONGTYPE, 'key ' .. key .. ' holds a ' .. t .. ', not a stream')
end

-- A stream that must exist with the group on it.
local function needgroup(stream, group)
  if not streamkey(stream) then
    fail(ERRORS.NOGROUP, 'stream ' .. stream .. ' does not exist (create the group with XGROUP CREATE ... MKSTREAM)')
  end
  -- XPENDING summary is O(1) and fails with NOGROUP when the group is missing.
  call('XPENDING', stream, group)
end

local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Truncates s to at most max bytes on a UTF-8 boundary, with a marker.
local function bounded(s, max)
  if #s <= max then return s end
  local cut = max - #TRUNCATED_MARKER
  -- Step back over UTF-8 continuation bytes so a character is not split.
  while cut > 0 do
    local b = string.byte(s, cut + 1)
    if b == nil or b < 0x80 or b >= 0xC0 then break end
    cut = cut - 1
  end
  return string.sub(s, 1, cut) .. TRUNCATED_MARKER
end

-- Appends the dead-letter metadata to a copy of fields.
local function deadrecord(fields, id, stream, group, consumer, deliveries, reason, errtext, now)
  local rec = {}
  for i = 1, #fields do rec[i] = fields[i] end
  local meta = {
    F_ORIGINAL_ID, id,
    F_STREAM, stream,
    F_GROUP, group,
    F_CONSUMER, consumer,
    F_DELIVERIES, tostring(deliveries),
    F_REASON, reason,
    F_ERROR, errtext,
    F_TIME, tostring(now),
  }
  for i = 1, #meta do rec[#rec + 1] = meta[i] end
  rec[#rec + 1] = F_META_COUNT
  rec[#rec + 1] = tostring(#meta / 2 + 1)
  return rec
end

-- Whether an entry with these fields can be dead-lettered (its record,
-- metadata included, fits in one XADD built from Lua).
local function fitsdeadletter(fields)
  return #fields + 20 <= MAX_CALL_VALUES
end

-- Appends a dead-letter record to dlq.
local function xaddrecord(dlq, rec)
  return call('XADD', dlq, '*', unpack(rec))
end

local function fieldbytes(fields)
  local n = 0
  for i = 1, #fields do n = n + #fields[i] end
  return n
end

-- The two keys of claim and deadletter (named fn in the error): the
-- stream and its dead-letter stream, which must differ.
local function streamanddlq(keys, fn)
  local stream, dlq = keys[1], keys[2]
  if stream == nil or dlq == nil then
    fail(ERRORS.BADARG, fn .. ' needs 2 keys: stream, dead-letter stream')
  end
  if stream == dlq then
    fail(ERRORS.BADARG, 'the dead-letter stream must differ from the stream')
  end
  return stream, dlq
end

-- Deletes ids once every group is done with them (defined below, after
-- callids, which it uses).
local deleteacked

-- The dead-letter step of one pending id, shared by claim and deadletter:
-- copies the entry to dlq with its metadata (owner and deliveries are its
-- owner and delivery count in the PEL) and XACKs it, XDELing it too with
-- delete (once every group is done with it). Returns 'dead' and the entry's fields; 'deleted' when the entry
-- is gone from the stream (the id is XACKed: cleared from the PEL); or
-- 'toolarge' when it has too many fields to copy (nothing written).
local function deadletterone(stream, dlq, group, id, owner, deliveries, reason, errtext, now, delete)
  local e = call('XRANGE', stream, id, id)
  if #e == 0 then
    call('XACK', stream, group, id)
    return 'deleted'
  end
  local fields = e[1][2]
  if not fitsdeadletter(fields) then return 'toolarge' end
  xaddrecord(dlq, deadrecord(fields, id, stream, group, owner, deliveries, reason, errtext, now))
  call('XACK', stream, group, id)
  if delete then deleteacked(stream, {id}) end
  return 'dead', fields
end

-- The owner and delivery count of one pending id, or nil when it is not in
-- the group's PEL.
local function pendinginfo(stream, group, id)
  local p = call('XPENDING', stream, group, id, id, 1)
  if #p == 0 then return nil end
  return p[1][2], tonumber(p[1][4]), tonumber(p[1][3])
end

-- The group's consumers from XINFO CONSUMERS: { {name, pending, idle}, ... }
-- with pending and idle (ms) as numbers.
local function consumersof(stream, group)
  local out = {}
  for _, c in ipairs(call('XINFO', 'CONSUMERS', stream, group)) do
    local name, pending, idle
    for i = 1, #c, 2 do
      if c[i] == 'name' then name = c[i + 1]
      elseif c[i] == 'pending' then pending = tonumber(c[i + 1])
      elseif c[i] == 'idle' then idle = tonumber(c[i + 1])
      end
    end
    out[#out + 1] = {name, pending, idle}
  end
  return out
end

-- a < b for stream ids "ms-seq" (decimal strings, no leading zeros),
-- compared as strings: sequence numbers can exceed what Lua numbers hold.
local function numless(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

-- Fails unless 1..MAX_COUNT ids were given.
local function checkidcount(n)
  if n == 0 then
    fail(ERRORS.BADARG, 'at least one id is required')
  end
  if n > MAX_COUNT then
    fail(ERRORS.BADARG, 'at most ' .. MAX_COUNT .. ' ids per call')
  end
end

-- The smallest and largest of ids, checking each, in one pass that parses
-- each id once (one pattern match per id instead of five).
local function idrange(ids)
  local lo, lom, los, hi, him, his
  for _, id in ipairs(ids) do
    local m, q = string.match(id, '^(%d+)%-(%d+)$')
    if not m then checkid(id, 'id') end
    if lo == nil or (m ~= lom and numless(m, lom)) or (m == lom and numless(q, los)) then
      lo, lom, los = id, m, q
    end
    if hi == nil or (m ~= him and numless(him, m)) or (m == him and numless(his, q)) then
      hi, him, his = id, m, q
    end
  end
  return lo, hi
end

-- Runs the command prefix..ids..suffix in chunks of ID_CHUNK ids (Lua's
-- unpack cannot pass thousands of arguments) and merges the replies:
-- integers are summed, arrays concatenated.
local ID_CHUNK = 1000
local function callids(prefix, ids, suffix)
  if suffix == nil and #ids <= ID_CHUNK then
    -- One call, without copying the ids (the hot path of ack).
    if #prefix == 2 then return call(prefix[1], prefix[2], unpack(ids)) end
    if #prefix == 3 then return call(prefix[1], prefix[2], prefix[3], unpack(ids)) end
  end
  local total, list = 0, nil
  for i = 1, #ids, ID_CHUNK do
    local cmd = {}
    for _, a in ipairs(prefix) do cmd[#cmd + 1] = a end
    for j = i, math.min(i + ID_CHUNK - 1, #ids) do cmd[#cmd + 1] = ids[j] end
    for _, a in ipairs(suffix or {}) do cmd[#cmd + 1] = a end
    local r = call(unpack(cmd))
    if type(r) == 'number' then
      total = total + r
    else
      list = list or {}
      for _, x in ipairs(r) do list[#list + 1] = x end
    end
  end
  return list or total
end

-- a < b for well-formed stream ids "ms-seq" (deleteacked, trim).
local function idless(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  if am ~= bm then return numless(am, bm) end
  return numless(as, bs)
end

-- Deleting entries (the delete option of claim, ack, deadletter,
-- lease_next and lease_release; since 1.3.0): an entry is deleted only
-- once every consumer group of the stream is done with it, so a group that
-- has not read it yet, or still holds it, keeps it. Redis 8.2 and later
-- have XDELEX ... ACKED for exactly this. Elsewhere (older Redis; Valkey,
-- which reports the Redis version it is compatible with, 7.2.4) each id is
-- checked against every group: it must be at or below the group's
-- last-delivered id and not in its PEL; a stream with one group deletes at
-- once.
local function hasxdelex()
  return (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x080200
end

-- Adds the ACL checks of deleteacked to checks.
local function deletechecks(checks, stream)
  if hasxdelex() then
    checks[#checks + 1] = {'XDELEX', stream, 'ACKED', 'IDS', '1', '0-0'}
  else
    checks[#checks + 1] = {'XDEL', stream, '0-0'}
    checks[#checks + 1] = {'XINFO', 'GROUPS', stream}
  end
end

function deleteacked(stream, ids)
  if #ids == 0 then return end
  if hasxdelex() then
    for i = 1, #ids, ID_CHUNK do
      local n = math.min(ID_CHUNK, #ids - i + 1)
      local cmd = {'XDELEX', stream, 'ACKED', 'IDS', n}
      for j = i, i + n - 1 do cmd[#cmd + 1] = ids[j] end
      call(unpack(cmd))
    end
    return
  end
  local groups = call('XINFO', 'GROUPS', stream)
  if #groups <= 1 then
    callids({'XDEL', stream}, ids)
    return
  end
  local gs = {}
  for _, g in ipairs(groups) do
    local name, last
    for k = 1, #g, 2 do
      if g[k] == 'name' then name = g[k + 1] elseif g[k] == 'last-delivered-id' then last = g[k + 1] end
    end
    gs[#gs + 1] = {name, last}
  end
  local del = {}
  for _, id in ipairs(ids) do
    local done = true
    for _, g in ipairs(gs) do
      if idless(g[2], id) or #call('XPENDING', stream, g[1], id, id, 1) > 0 then
        done = false
        break
      end
    end
    if done then del[#del + 1] = id end
  end
  if #del > 0 then callids({'XDEL', stream}, del) end
end

-- Last errors (since 1.3.0): a hash beside the stream, its key passed by
-- the caller (pelwarden.LastErrorsKeyFor), holding per pending entry of a
-- group (field "<group> <id>") the error text of its last failed attempt,
-- written by fail. A dead letter for max-deliveries takes its error from
-- there and drops the field, as does an entry found deleted while pending.
-- A success costs nothing: acks never touch the hash. Instead each fail
-- call looks at ERROR_PRUNE random fields and drops those whose entry is no
-- longer pending in its group (acked after a retry, or its group gone), so
-- stale fields stay a bounded share of the hash (at most about a third of
-- the entries failing now). A call without the key skips all of it.
local ERROR_PRUNE = 4

-- Adds the ACL checks of the last-errors steps (write: fail's HSET too).
local function errorchecks(checks, errkey, write)
  if errkey == nil then return end
  checks[#checks + 1] = {'TYPE', errkey}
  checks[#checks + 1] = {'EXISTS', errkey}
  checks[#checks + 1] = {'HGET', errkey, 'f'}
  checks[#checks + 1] = {'HDEL', errkey, 'f'}
  if write then
    checks[#checks + 1] = {'HSET', errkey, 'f', 'v'}
    checks[#checks + 1] = {'HRANDFIELD', errkey, '1'}
  end
end

-- Fails unless the last-errors key holds a hash or nothing: checked
-- before any change, so a wrong key never leaves a call half done.
local function errorhash(errkey)
  if errkey == nil then return end
  local t = call('TYPE', errkey)
  if type(t) == 'table' then t = t.ok end
  if t ~= 'hash' and t ~= 'none' then
    fail(ERRORS.WRONGTYPE, 'the last-errors key ' .. errkey .. ' holds a ' .. tostring(t) .. ', not a hash')
  end
end

-- The last error kept for id in group ('' when none, or without the key).
local function lasterror(errkey, group, id)
  if errkey == nil then return '' end
  return call('HGET', errkey, group .. ' ' .. id) or ''
end

-- Drops the last errors of ids in group (after their dead letter).
local function forgeterrors(errkey, group, ids)
  if errkey == nil or #ids == 0 then return end
  if call('EXISTS', errkey) == 0 then return end
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = group .. ' ' .. id end
  callids({'HDEL', errkey}, fields)
end

-- Drops up to ERROR_PRUNE random fields of the hash whose entry is no
-- longer pending in its group (see above).
local function pruneerrors(stream, errkey)
  local fields = call('HRANDFIELD', errkey, ERROR_PRUNE)
  for _, f in ipairs(fields) do
    local group, id = string.match(f, '^(.*) (%d+%-%d+)$')
    local stale = group == nil
    if not stale then
      local p = redis.pcall('XPENDING', stream, group, id, id, 1)
      stale = (type(p) == 'table' and p.err ~= nil) or #p == 0
    end
    if stale then call('HDEL', errkey, f) end
  end
end

-- The optional last-errors key at keys[i]: it must differ from the others.
local function errorkey(keys, i, fn)
  local k = keys[i]
  if k == nil then return nil end
  for j = 1, i - 1 do
    if keys[j] == k then fail(ERRORS.BADARG, fn .. ': the last-errors key must differ from the other keys') end
  end
  return k
end

-- The retry delay of an entry delivered n times: backoff[min(n, #backoff)]
-- (0 without backoff, or before its first delivery). The one rule of
-- backoff: claim and lease_next compare it with the entry's idle time, and
-- fail sets that idle time so that it counts from the failed attempt.
local function retrydelay(backoff, deliveries)
  if #backoff == 0 or deliveries <= 0 then return 0 end
  return backoff[math.min(deliveries, #backoff)]
end

-- Reads the ids at ARGV[first..] and checks each.
local function idlist(args, first)
  local ids = {}
  for i = first, #args do
    ids[#ids + 1] = checkid(args[i], 'id')
  end
  checkidcount(#ids)
  return ids
end

------------------------------------------------------------------------------
-- pelwarden_v1_claim: one cursor page of the reclaim step.
--
-- KEYS[1] stream            the source stream
-- KEYS[2] dead-letter stream  (same hash slot as KEYS[1])
-- KEYS[3] last-errors hash  optional (since 1.3.0): a record for
--                           max-deliveries keeps the entry's last error
-- ARGV[1] group
-- ARGV[2] consumer          the caller; live entries are transferred to it
-- ARGV[3] min-idle ms       only entries idle at least this long are touched
-- ARGV[4] cursor            "0-0" to start a pass, else the previous reply's
-- ARGV[5] count             at most this many entries (live + dead) per page,
--                           1..10000; at most count*10 PEL entries are scanned
-- ARGV[6] max-deliveries    0 = no limit; an entry already delivered this
--                           many times is dead-lettered, not handed out
-- ARGV[7] delete            "1": also delete dead-lettered entries from
--                           KEYS[1] once every group is done with them
-- ARGV[8] claim-live        "0": dead-letter only, leave the others untouched
--                           and owned by whoever holds them
-- ARGV[9] max-bytes         0 = no limit; stop the page once the field bytes
--                           of its live and dead-lettered entries reach this
--                           (at least one entry is always taken), so a PEL of
--                           1 MiB entries never builds a huge reply or call
-- ARGV[10..] backoff ms     optional; delay before attempt n+1 of an entry
--                           delivered n times is backoff[min(n, #backoff)].
--                           An entry idle less than max(min-idle, delay) is
--                           left alone, its delivery count not bumped.
-- Reply: { next-cursor ("0-0" when the pass is complete),
--          { {id, {field, value, ...}, deliveries}, ... }  live, now owned
--          { id, ... }       dead-lettered (XACKed, copied to KEYS[2])
--          { id, ... }       deleted from the stream while pending (cleared)
--          backed-off        number of idle entries left alone by backoff
--          { id, ... }       too large: at max-deliveries but with too many
--                            fields to be copied by Lua (see MAX_CALL_VALUES);
--                            left pending, untouched, owned by whoever held
--                            them, so nothing is lost; reported on every pass
--                            until an operator moves them (added in 1.0.1)
--          { consumer, n, ... } taken from: for each other consumer that
--                            held some of the live entries, how many,
--                            sorted by consumer (added in 1.4.0) }
-- KEYS[1] and KEYS[2] must differ (PWBADARG).
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function claim(keys, args)
  local stream, dlq = streamanddlq(keys, 'claim')
  local errkey = errorkey(keys, 3, 'claim')
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local minidle = argint(args, 3, 'min-idle', 0, 2 ^ 53)
  local cursor = checkid(argstr(args, 4, 'cursor'), 'cursor')
  local count = argint(args, 5, 'count', 1, MAX_COUNT)
  local maxdeliveries = argint(args, 6, 'max-deliveries', 0, 2 ^ 53)
  local delete = argbool(args, 7, 'delete')
  local claimlive = argbool(args, 8, 'claim-live')
  local maxbytes = argint(args, 9, 'max-bytes', 0, 2 ^ 53)
  local backoff = {}
  for i = 10, #args do
    backoff[#backoff + 1] = argint(args, i, 'backoff', 0, 2 ^ 53)
  end

  local checks = {{'TYPE', stream}, {'TYPE', dlq}, {'XPENDING', stream, group}, {'XACK', stream, group, '0-0'}}
  if maxdeliveries > 0 then
    checks[#checks + 1] = {'XRANGE', stream, '-', '+'}
    checks[#checks + 1] = {'XADD', dlq, '*', 'f', 'v'}
    checks[#checks + 1] = {'TIME'}
    if delete then deletechecks(checks, stream) end
  end
  errorchecks(checks, errkey, false)
  if claimlive then checks[#checks + 1] = {'XCLAIM', stream, group, consumer, '0', '0-0'} end
  allow(checks)
  needgroup(stream, group)
  streamkey(dlq)
  errorhash(errkey)
  if ismaxid(cursor) then return {'0-0', {}, {}, {}, 0, {}, {}} end

  local budget = count * SCAN_FACTOR
  local live, dead, deleted, toolarge = {}, {}, {}, {}
  local taken, bytes, backedoff = 0, 0, 0
  local now = nil
  local last = nil -- last PEL id examined
  local full = false
  local scanned, exhausted = 0, false
  -- The PEL is read in growing chunks (count, then doubling) up to the
  -- count*10 budget, so a page of idle entries reads little more than it
  -- takes. Live entries are claimed with one XCLAIM at the end, unless
  -- max-bytes needs their sizes one by one.
  local chunk = count
  local batch = (maxbytes == 0) and claimlive
  local toclaim, toclaimdel, toclaimowner = {}, {}, {}
  -- from: live entries per previous owner other than the caller.
  local from = {}
  local function takenfrom(owner)
    if owner ~= consumer then from[owner] = (from[owner] or 0) + 1 end
  end

  while not full and not exhausted and scanned < budget do
    local n = math.min(chunk, budget - scanned)
    local start = '(' .. (last or cursor)
    local page = call('XPENDING', stream, group, start, '+', n)
    scanned = scanned + #page
    if #page < n then exhausted = true end
    chunk = chunk * 2
    for _, p in ipairs(page) do
      local id, owner, idle, deliveries = p[1], p[2], tonumber(p[3]), tonumber(p[4])
      if taken >= count or (maxbytes > 0 and bytes >= maxbytes) then
        full = true
        break
      end
      last = id
      local threshold = math.max(minidle, retrydelay(backoff, deliveries))
      if idle >= minidle and idle < threshold then
        backedoff = backedoff + 1
      elseif idle >= threshold then
        if maxdeliveries > 0 and deliveries >= maxdeliveries then
          now = now or nowms()
          local done, fields = deadletterone(stream, dlq, group, id, owner, deliveries,
            REASON_MAX_DELIVERIES, lasterror(errkey, group, id), now, delete)
          if done == 'deleted' then
            deleted[#deleted + 1] = id
          elseif done == 'toolarge' then
            toolarge[#toolarge + 1] = id
          else
            dead[#dead + 1] = id
            bytes = bytes + fieldbytes(fields)
          end
          taken = taken + 1
        elseif batch then
          toclaim[#toclaim + 1] = id
          toclaimdel[id] = deliveries
          toclaimowner[id] = owner
          taken = taken + 1
        elseif claimlive then
          local c = call('XCLAIM', stream, group, consumer, 0, id)
          if #c == 0 then
            -- The entry is gone from the stream. Redis 7+ drops such ids from
            -- the PEL in XCLAIM already; XACK makes sure on every server.
            call('XACK', stream, group, id)
            deleted[#deleted + 1] = id
          else
            local fields = c[1][2]
            live[#live + 1] = {id, fields, deliveries + 1}
            takenfrom(owner)
            bytes = bytes + fieldbytes(fields)
          end
          taken = taken + 1
        end
      end
    end
  end

  if #toclaim > 0 then
    local got = callids({'XCLAIM', stream, group, consumer, 0}, toclaim)
    local seen = {}
    for _, c in ipairs(got) do
      -- Some servers answer a deleted entry with a nil body: not live.
      if type(c[2]) == 'table' then
        seen[c[1]] = true
        live[#live + 1] = {c[1], c[2], toclaimdel[c[1]] + 1}
        takenfrom(toclaimowner[c[1]])
      end
    end
    local gone = {}
    for _, id in ipairs(toclaim) do
      if not seen[id] then gone[#gone + 1] = id; deleted[#deleted + 1] = id end
    end
    if #gone > 0 then callids({'XACK', stream, group}, gone) end
  end

  forgeterrors(errkey, group, dead)
  forgeterrors(errkey, group, deleted)
  local next = '0-0'
  if full or not exhausted then
    next = last or cursor
  end
  local owners = {}
  for owner in pairs(from) do owners[#owners + 1] = owner end
  table.sort(owners)
  local takenfromlist = {}
  for _, owner in ipairs(owners) do
    takenfromlist[#takenfromlist + 1] = owner
    takenfromlist[#takenfromlist + 1] = from[owner]
  end
  return {next, live, dead, deleted, backedoff, toolarge, takenfromlist}
end

------------------------------------------------------------------------------
-- pelwarden_v1_ack: fenced acknowledgement of a batch.
--
-- KEYS[1] stream
-- ARGV[1] group
-- ARGV[2] consumer     only ids still owned by this consumer are acked
-- ARGV[3] delete       "1": also delete the acked entries from the stream
--                      once every group is done with them (since 1.3.0;
--                      a plain XDEL before)
-- ARGV[4..] ids        1..10000 ids, in any order; fastest with the lowest id
--                      first and the highest last (one range read then
--                      covers the batch without parsing every id)
-- Reply: { acked (integer), { id, ... } not owned (ownership moved, or no
--          longer pending),
--          { id, ... } no longer pending: the not-owned ids no consumer
--                      holds (acked already, e.g. by an earlier attempt of a
--                      retried call, or cleared; added in 1.0.3) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function ack(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'ack needs 1 key: stream') end
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local delete = argbool(args, 3, 'delete')
  local count = #args - 3
  checkidcount(count)
  local first, last = checkid(args[4], 'id'), checkid(args[#args], 'id')
  local checks = {{'TYPE', stream}, {'XPENDING', stream, group}, {'XACK', stream, group, '0-0'}}
  if delete then deletechecks(checks, stream) end
  allow(checks)
  needgroup(stream, group)

  -- Ownership comes from range reads of the consumer's own pending entries.
  -- The first read takes the first and last ids as its bounds: callers put
  -- the lowest id first and the highest last (the Go wrapper does), which
  -- spares parsing every id on the hot path.
  local mine = {}
  local function readmine(lo, hi, n)
    local rows = call('XPENDING', stream, group, lo, hi, n + 64, consumer)
    for i = 1, #rows do mine[rows[i][1]] = true end
  end
  readmine(first, last, count)
  local owned, lost, gone, missing = {}, {}, {}, {}
  for i = 4, #args do
    local id = args[i]
    if mine[id] then owned[#owned + 1] = id else missing[#missing + 1] = id end
  end
  if #missing > 16 then
    -- Ids out of order, or rows cut off by the limit: one more range read,
    -- over the true bounds of the rest.
    local lo, hi = idrange(missing)
    readmine(lo, hi, #missing)
  end
  for _, id in ipairs(missing) do
    -- An id no range read showed (owned elsewhere, no longer pending, or
    -- written unnormalised such as "01-0") is checked on its own. Lost
    -- ownership is rare. Every id a read showed is well formed; the others
    -- are checked here, before anything is written.
    local owner = consumer
    if not mine[id] then owner = pendinginfo(stream, group, checkid(id, 'id')) end
    if owner == consumer then
      owned[#owned + 1] = id
    else
      lost[#lost + 1] = id
      if owner == nil then gone[#gone + 1] = id end
    end
  end
  local n = 0
  if #owned > 0 then
    n = callids({'XACK', stream, group}, owned)
    if delete then deleteacked(stream, owned) end
  end
  return {n, lost, gone}
end

------------------------------------------------------------------------------
-- pelwarden_v1_deadletter: a handler's permanent failure.
--
-- KEYS[1] stream
-- KEYS[2] dead-letter stream  (same hash slot as KEYS[1])
-- KEYS[3] last-errors hash  optional (since 1.3.0): with an empty error
--                      text, each record keeps its entry's last error
-- ARGV[1] group
-- ARGV[2] consumer     only ids still owned by this consumer are moved
-- ARGV[3] delete       "1": also delete the entries from the stream once
--                      every group is done with them
-- ARGV[4] reason       short machine-readable reason, e.g. "handler"
-- ARGV[5] error text   stored bounded to 4096 bytes, with a marker when cut
-- ARGV[6..] ids        1..10000 ids
-- Each owned id is copied to KEYS[2] (fields unchanged plus metadata) and
-- XACKed in one atomic step. A second call for the same id finds it no
-- longer pending and writes nothing: the call is idempotent.
-- KEYS[1] and KEYS[2] must differ (PWBADARG).
-- Reply: { { id, ... } dead-lettered, { id, ... } not owned,
--          { id, ... } deleted from the stream while pending (cleared),
--          { id, ... } too large: owned, but with too many fields to be
--                      copied by Lua (see MAX_CALL_VALUES); left pending and
--                      owned by the consumer, nothing written (added in 1.0.1),
--          { id, ... } no longer pending: the not-owned ids no consumer
--                      holds (dead-lettered already, e.g. by an earlier
--                      attempt of a retried call; added in 1.0.3) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function deadletter(keys, args)
  local stream, dlq = streamanddlq(keys, 'deadletter')
  local errkey = errorkey(keys, 3, 'deadletter')
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local delete = argbool(args, 3, 'delete')
  local reason = argname(args, 4, 'reason')
  if #reason > MAX_REASON_BYTES then fail(ERRORS.BADARG, 'reason must be at most ' .. MAX_REASON_BYTES .. ' bytes') end
  local errtext = bounded(argstr(args, 5, 'error'), MAX_ERROR_BYTES)
  local ids = idlist(args, 6)
  local checks = {{'TYPE', stream}, {'TYPE', dlq}, {'XPENDING', stream, group}, {'TIME'},
    {'XRANGE', stream, '-', '+'}, {'XACK', stream, group, '0-0'}, {'XADD', dlq, '*', 'f', 'v'}}
  if delete then deletechecks(checks, stream) end
  errorchecks(checks, errkey, false)
  allow(checks)
  needgroup(stream, group)
  streamkey(dlq)
  errorhash(errkey)

  local dead, lost, deleted, toolarge, gone = {}, {}, {}, {}, {}
  local now = nowms()
  for _, id in ipairs(ids) do
    local owner, deliveries = pendinginfo(stream, group, id)
    if owner ~= consumer then
      lost[#lost + 1] = id
      if owner == nil then gone[#gone + 1] = id end
    else
      local text = errtext
      if text == '' then text = lasterror(errkey, group, id) end
      local done = deadletterone(stream, dlq, group, id, owner, deliveries, reason, text, now, delete)
      if done == 'deleted' then
        deleted[#deleted + 1] = id
      elseif done == 'toolarge' then
        toolarge[#toolarge + 1] = id
      else
        dead[#dead + 1] = id
      end
    end
  end
  forgeterrors(errkey, group, dead)
  forgeterrors(errkey, group, deleted)
  return {dead, lost, deleted, toolarge, gone}
end

-- XCLAIMs the ids still owned by consumer to itself, JUSTID (the
-- delivery count is not bumped unless the options set it), with the
-- options opts(deliveries) gives for each id's delivery count (e.g.
-- {'IDLE', '0'}); ids that share their options go in one XCLAIM. An owned
-- id XCLAIM does not return is gone from the stream: it is XACKed. Shared
-- by extend, release, fail and giveback. Returns the count XCLAIMed, the
-- not-owned ids, the deleted ids and the XCLAIMed ones.
local function reclaimowned(stream, group, consumer, ids, opts)
  local byopts, order, lost, kept, deleted = {}, {}, {}, {}, {}
  local lasto, lastkey = nil, nil -- idleopts gives one table: one concat
  for _, id in ipairs(ids) do
    local owner, deliveries = pendinginfo(stream, group, id)
    if owner ~= consumer then
      lost[#lost + 1] = id
    else
      local o = opts(deliveries)
      if o ~= lasto then lasto, lastkey = o, table.concat(o, ' ') end
      local key = lastkey
      if byopts[key] == nil then
        byopts[key] = {o, {}}
        order[#order + 1] = key
      end
      table.insert(byopts[key][2], id)
    end
  end
  for _, key in ipairs(order) do
    local o, owned = byopts[key][1], byopts[key][2]
    local suffix = {}
    for _, x in ipairs(o) do suffix[#suffix + 1] = x end
    suffix[#suffix + 1] = 'JUSTID'
    local seen = {}
    for _, id in ipairs(callids({'XCLAIM', stream, group, consumer, 0}, owned, suffix)) do seen[id] = true end
    for _, id in ipairs(owned) do
      if seen[id] then
        kept[#kept + 1] = id
      else
        redis.call('XACK', stream, group, id)
        deleted[#deleted + 1] = id
      end
    end
  end
  return #kept, lost, deleted, kept
end

-- The options of reclaimowned for one idle time (ms) for every id.
local function idleopts(idle)
  local o = {'IDLE', string.format('%.0f', idle)}
  return function() return o end
end

------------------------------------------------------------------------------
-- pelwarden_v1_extend: lease heartbeat.
--
-- KEYS[1] stream
-- ARGV[1] group
-- ARGV[2] consumer     only ids still owned by this consumer are extended
-- ARGV[3..] ids        1..10000 ids
-- Resets the idle time of owned ids without bumping their delivery count
-- (XCLAIM ... JUSTID).
-- Reply: { extended (integer), { id, ... } not owned,
--          { id, ... } deleted from the stream while pending (cleared) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function extend(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'extend needs 1 key: stream') end
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local ids = idlist(args, 3)
  allow({{'TYPE', stream}, {'XPENDING', stream, group},
    {'XCLAIM', stream, group, consumer, '0', '0-0'}, {'XACK', stream, group, '0-0'}})
  needgroup(stream, group)
  local n, lost, deleted = reclaimowned(stream, group, consumer, ids, idleopts(0))
  return {n, lost, deleted}
end

------------------------------------------------------------------------------
-- pelwarden_v1_release: give entries back for a later retry.
--
-- KEYS[1] stream
-- ARGV[1] group
-- ARGV[2] consumer     only ids still owned by this consumer are released
-- ARGV[3] min-idle ms  the min-idle that reclaimers use
-- ARGV[4] delay ms     the entry becomes claimable after this long
-- ARGV[5..] ids        1..10000 ids
-- Sets the idle time of owned ids to max(0, min-idle - delay) without
-- bumping their delivery count (XCLAIM ... IDLE ... JUSTID), so a claim
-- with min-idle takes them again after delay (or after min-idle when delay
-- is longer: idle time cannot be set in the future).
-- Reply: { released (integer), { id, ... } not owned,
--          { id, ... } deleted from the stream while pending (cleared) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function release(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'release needs 1 key: stream') end
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local minidle = argint(args, 3, 'min-idle', 0, 2 ^ 53)
  local delay = argint(args, 4, 'delay', 0, 2 ^ 53)
  local ids = idlist(args, 5)
  allow({{'TYPE', stream}, {'XPENDING', stream, group},
    {'XCLAIM', stream, group, consumer, '0', '0-0'}, {'XACK', stream, group, '0-0'}})
  needgroup(stream, group)
  local n, lost, deleted = reclaimowned(stream, group, consumer, ids, idleopts(math.max(0, minidle - delay)))
  return {n, lost, deleted}
end

------------------------------------------------------------------------------
-- pelwarden_v1_fail: a failed attempt (added in 1.3.0): give entries back
-- for a retry after their backoff, and keep the attempt's error.
--
-- KEYS[1] stream
-- KEYS[2] last-errors hash  optional (same hash slot;
--                           pelwarden.LastErrorsKeyFor): without it no
--                           error is kept
-- ARGV[1] group
-- ARGV[2] consumer     only ids still owned by this consumer are touched
-- ARGV[3] min-idle ms  the min-idle that reclaimers use (0 for lease_next)
-- ARGV[4] delay ms     the least delay before a retry (a RetryAfter's)
-- ARGV[5] error text   the attempt's error, kept bounded to 4096 bytes
--                      until the entry is acked or dead-lettered ('' keeps
--                      nothing new)
-- ARGV[6] n            how many backoff values follow, 0..MAX_COUNT
-- ARGV[7..6+n]         backoff ms, as in claim
-- ARGV[7+n..] ids      1..10000 ids
-- Each owned id waits d = max(delay, the backoff for its delivery count)
-- from now: its idle time is set to max(0, min-idle - d) without bumping
-- its delivery count (XCLAIM ... IDLE ... JUSTID), and claim (threshold
-- max(min-idle, backoff)) or lease_next (min-idle 0, threshold backoff)
-- takes it again d after this call, as long as d <= min-idle or d is the
-- backoff. So the backoff counts from the end of the failed attempt, in
-- both modes.
-- Reply: { failed (integer), { id, ... } not owned,
--          { id, ... } deleted from the stream while pending (cleared) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function failed(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'fail needs a key: stream (and the last-errors hash)') end
  local errkey = errorkey(keys, 2, 'fail')
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local minidle = argint(args, 3, 'min-idle', 0, 2 ^ 53)
  local delay = argint(args, 4, 'delay', 0, 2 ^ 53)
  local errtext = bounded(argstr(args, 5, 'error'), MAX_ERROR_BYTES)
  local nb = argint(args, 6, 'backoff count', 0, MAX_COUNT)
  local backoff = {}
  for i = 1, nb do backoff[i] = argint(args, 6 + i, 'backoff', 0, 2 ^ 53) end
  local ids = idlist(args, 7 + nb)
  local checks = {{'TYPE', stream}, {'XPENDING', stream, group},
    {'XCLAIM', stream, group, consumer, '0', '0-0'}, {'XACK', stream, group, '0-0'}}
  errorchecks(checks, errkey, true)
  allow(checks)
  needgroup(stream, group)
  errorhash(errkey)

  local n, lost, deleted, kept = reclaimowned(stream, group, consumer, ids, function(deliveries)
    local d = math.max(delay, retrydelay(backoff, deliveries))
    return {'IDLE', string.format('%.0f', math.max(0, minidle - d))}
  end)
  if errkey ~= nil and errtext ~= '' then
    for _, id in ipairs(kept) do
      local r = redis.pcall('HSET', errkey, group .. ' ' .. id, errtext)
      if type(r) == 'table' and r.err then
        -- Out of memory (only under EVALSHA, where scripts have no
        -- flags): the retry matters more than its error text.
        if not string.find(r.err, '^OOM') then call('HSET', errkey, group .. ' ' .. id, errtext) end
        break
      end
    end
  end
  forgeterrors(errkey, group, deleted)
  if errkey ~= nil then pruneerrors(stream, errkey) end
  return {n, lost, deleted}
end

------------------------------------------------------------------------------
-- pelwarden_v1_giveback: give back entries handed out but never started
-- (added in 1.3.0), at a graceful stop.
--
-- KEYS[1] stream
-- ARGV[1] group
-- ARGV[2] consumer     only ids still owned by this consumer are given back
-- ARGV[3] min-idle ms  the min-idle that reclaimers use
-- ARGV[4..] ids        1..10000 ids
-- Each owned id gets its delivery count less one (the delivery that handed
-- it out, which started no attempt) and idle time min-idle, so a claim
-- takes it at once and a delivery limit counts only attempts (XCLAIM ...
-- IDLE ... RETRYCOUNT ... JUSTID).
-- Reply: { given back (integer), { id, ... } not owned,
--          { id, ... } deleted from the stream while pending (cleared) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function giveback(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'giveback needs 1 key: stream') end
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local minidle = argint(args, 3, 'min-idle', 0, 2 ^ 53)
  local ids = idlist(args, 4)
  allow({{'TYPE', stream}, {'XPENDING', stream, group},
    {'XCLAIM', stream, group, consumer, '0', '0-0'}, {'XACK', stream, group, '0-0'}})
  needgroup(stream, group)

  local idle = string.format('%.0f', minidle)
  local n, lost, deleted = reclaimowned(stream, group, consumer, ids, function(deliveries)
    return {'IDLE', idle, 'RETRYCOUNT', string.format('%.0f', math.max(0, deliveries - 1))}
  end)
  return {n, lost, deleted}
end

------------------------------------------------------------------------------
-- pelwarden_v1_reap: delete dead consumers that own nothing.
--
-- KEYS[1] stream
-- ARGV[1] group
-- ARGV[2] idle ms      consumers idle at least this long are candidates
-- ARGV[3..] keep       optional consumer names never deleted (the caller)
-- A candidate that owns pending entries is kept: deleting it would drop
-- its PEL. The check and XGROUP DELCONSUMER are one atomic step.
-- Reply: { { name, ... } deleted, { {name, pending}, ... } kept because they
--          still own pending entries }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function reap(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'reap needs 1 key: stream') end
  local group = argname(args, 1, 'group')
  local idlems = argint(args, 2, 'idle', 0, 2 ^ 53)
  local keep = {}
  for i = 3, #args do keep[args[i]] = true end
  allow({{'TYPE', stream}, {'XPENDING', stream, group},
    {'XINFO', 'CONSUMERS', stream, group}, {'XGROUP', 'DELCONSUMER', stream, group, 'c'}})
  needgroup(stream, group)

  local deleted, kept = {}, {}
  for _, c in ipairs(consumersof(stream, group)) do
    local name, pending, idle = c[1], c[2], c[3]
    if name and not keep[name] and idle and idle >= idlems then
      if pending == 0 then
        redis.call('XGROUP', 'DELCONSUMER', stream, group, name)
        deleted[#deleted + 1] = name
      else
        kept[#kept + 1] = {name, pending}
      end
    end
  end
  return {deleted, kept}
end

------------------------------------------------------------------------------
-- pelwarden_v1_redrive: move dead-letter records back to a stream.
--
-- KEYS[1] dead-letter stream
-- KEYS[2] target stream     (same hash slot as KEYS[1])
-- ARGV[1] cursor            "0-0" to start, else the previous reply's
-- ARGV[2] count             at most this many records per page, 1..10000
-- ARGV[3] any-source        "0": only records whose recorded source stream
--                           is KEYS[2] move, others are skipped; "1": every
--                           pelwarden record moves to KEYS[2]
-- Each moved record is re-added to KEYS[2] with its original fields (the
-- metadata dropped) plus pelwarden.redrives = previous + 1, and deleted from
-- KEYS[1], atomically for the page. Records without pelwarden metadata
-- (foreign entries) are never moved and are reported. A record is
-- pelwarden's when its last field is pelwarden.meta with a decimal count N
-- (2 <= 2N <= its element count: the count and at least one more) and each
-- of its last N field names starts with "pelwarden."; anything else is
-- foreign and never touched.
-- KEYS[1] and KEYS[2] must differ (PWBADARG).
-- Reply: { next-cursor ("0-0" when done), { {old-id, new-id}, ... } moved,
--          { id, ... } foreign (no metadata), { id, ... } other source,
--          { id, ... } too large: too many fields to be re-added by Lua (see
--                      MAX_CALL_VALUES); left in place (added in 1.0.1) }
-- Errors: PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function redrive(keys, args)
  local dlq, target = keys[1], keys[2]
  if dlq == nil or target == nil then
    fail(ERRORS.BADARG, 'redrive needs 2 keys: dead-letter stream, target stream')
  end
  if dlq == target then
    fail(ERRORS.BADARG, 'the target stream must differ from the dead-letter stream')
  end
  local cursor = checkid(argstr(args, 1, 'cursor'), 'cursor')
  local count = argint(args, 2, 'count', 1, MAX_COUNT)
  local anysource = argbool(args, 3, 'any-source')
  allow({{'TYPE', target}, {'TYPE', dlq}, {'XRANGE', dlq, '-', '+'},
    {'XADD', target, '*', 'f', 'v'}, {'XDEL', dlq, '0-0'}})
  streamkey(target)
  if not streamkey(dlq) or ismaxid(cursor) then return {'0-0', {}, {}, {}, {}} end

  local page = call('XRANGE', dlq, '(' .. cursor, '+', 'COUNT', count)
  local moved, foreign, other, toolarge = {}, {}, {}, {}
  for _, e in ipairs(page) do
    local id, f = e[1], e[2]
    local n = #f
    local metapairs = 0
    if n >= 2 and f[n - 1] == F_META_COUNT and string.find(f[n], '^%d%d?%d?$') then
      metapairs = tonumber(f[n])
    end
    if metapairs >= 1 and metapairs * 2 <= n then
      for i = n - metapairs * 2 + 1, n, 2 do
        if string.sub(f[i], 1, 10) ~= 'pelwarden.' then metapairs = 0; break end
      end
    end
    if metapairs < 2 or metapairs * 2 > n then
      foreign[#foreign + 1] = id
    elseif n - metapairs * 2 + 2 > MAX_CALL_VALUES then
      toolarge[#toolarge + 1] = id
    else
      local source, redrives = nil, 0
      for i = n - metapairs * 2 + 1, n, 2 do
        if f[i] == F_STREAM then source = f[i + 1] end
      end
      if not anysource and source ~= target then
        other[#other + 1] = id
      else
        local out = {}
        for i = 1, n - metapairs * 2, 2 do
          if f[i] == F_REDRIVES then
            redrives = tonumber(f[i + 1]) or 0
          else
            out[#out + 1] = f[i]
            out[#out + 1] = f[i + 1]
          end
        end
        out[#out + 1] = F_REDRIVES
        out[#out + 1] = tostring(redrives + 1)
        local newid = call('XADD', target, '*', unpack(out))
        redis.call('XDEL', dlq, id)
        moved[#moved + 1] = {id, newid}
      end
    end
  end
  local next = '0-0'
  if #page >= count then next = page[#page][1] end
  return {next, moved, foreign, other, toolarge}
end

------------------------------------------------------------------------------
-- pelwarden_v1_stats: a one-call snapshot of a group (read only).
--
-- KEYS[1] stream
-- KEYS[2] dead-letter stream  (same hash slot as KEYS[1])
-- ARGV[1] group
-- Reply: a flat list of name, value pairs:
--   pending        PEL size
--   lowest         lowest pending id ("" when the PEL is empty)
--   highest        highest pending id ("" when the PEL is empty)
--   consumers      { {name, pending, idle-ms}, ... }
--   lag            entries not yet delivered to the group, -1 when unknown
--   entries-read   entries read by the group, -1 when unknown
--   last-delivered last id delivered to the group
--   length         stream length
--   dead-letter-length
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function stats(keys, args)
  local stream, dlq = keys[1], keys[2]
  if stream == nil or dlq == nil then
    fail(ERRORS.BADARG, 'stats needs 2 keys: stream, dead-letter stream')
  end
  local group = argname(args, 1, 'group')
  allow({{'TYPE', stream}, {'TYPE', dlq}, {'XPENDING', stream, group},
    {'XLEN', stream}, {'XLEN', dlq}, {'XINFO', 'CONSUMERS', stream, group}, {'XINFO', 'GROUPS', stream}})
  needgroup(stream, group)
  local dlqlen = 0
  if streamkey(dlq) then dlqlen = redis.call('XLEN', dlq) end

  local summary = call('XPENDING', stream, group)
  local lowest, highest = summary[2] or '', summary[3] or ''

  local consumers = consumersof(stream, group)

  local lag, entriesread, lastdelivered = -1, -1, ''
  for _, g in ipairs(call('XINFO', 'GROUPS', stream)) do
    local name, l, er, ld
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1]
      elseif g[i] == 'lag' then l = g[i + 1]
      elseif g[i] == 'entries-read' then er = g[i + 1]
      elseif g[i] == 'last-delivered-id' then ld = g[i + 1]
      end
    end
    if name == group then
      if type(l) == 'number' then lag = l end
      if type(er) == 'number' then entriesread = er end
      lastdelivered = ld or ''
    end
  end

  return {
    'pending', summary[1],
    'lowest', lowest,
    'highest', highest,
    'consumers', consumers,
    'lag', lag,
    'entries-read', entriesread,
    'last-delivered', lastdelivered,
    'length', redis.call('XLEN', stream),
    'dead-letter-length', dlqlen,
  }
end

------------------------------------------------------------------------------
-- pelwarden_v1_trim: delete the entries every consumer group has
-- acknowledged (added in 1.1.0).
--
-- KEYS[1] stream
-- ARGV[1] limit      at most this many entries are deleted (in a dry run,
--                    counted) per call, 1..10000
-- ARGV[2] dry-run    "1": delete nothing, report what the call would delete
-- The bound is the smallest, over the stream's consumer groups, of the
-- group's oldest pending id and the id right after its last-delivered id.
-- Every entry strictly below the bound was delivered to every group and is
-- pending in none: each group acknowledged it (or skipped it, with XGROUP
-- SETID). An entry a group still needs (pending, or not yet delivered to
-- it) is at or above the bound and never deleted. The oldest entries below
-- the bound are deleted, at most limit: first whole stream nodes with
-- XTRIM MINID ~ bound LIMIT limit-1 (freed without reading an entry), then
-- the rest exactly (XTRIM's exact mode has no LIMIT: an XRANGE of what is
-- left below the bound, at most one node's worth or the budget left, finds
-- where to cut, and XTRIM MINID = that id). A dry run counts in XRANGE
-- steps of TRIM_CHUNK entries. Everything is read and deleted in one
-- atomic call, so no group moves in between.
-- A stream without consumer groups is refused (PWNOGROUP): nothing records
-- what its readers have processed (XTRIM it directly if that is meant).
-- Redis 8.2's XTRIM ... ACKED is not used: the bound above gives the same
-- guarantee on every server.
-- Reply: { trimmed (integer: entries deleted; in a dry run, that would be),
--          bound (entries strictly below it are acknowledged by every group),
--          holder (the group that sets the bound; the first in XINFO GROUPS
--                  order on a tie),
--          more (1: entries below the bound remain after this call),
--          first, last (the first and the last id trimmed, "" when none),
--          length (stream length after the call),
--          { {name, pending, oldest pending id or "", last-delivered id,
--             bound}, ... } one per group, in XINFO GROUPS order }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
-- n + 1 for a decimal string without leading zeros (exact beyond 2^53).
local function decinc(n)
  local digits, carry = {}, 1
  for i = #n, 1, -1 do
    local d = string.byte(n, i) - 48 + carry
    carry = 0
    if d == 10 then d, carry = 0, 1 end
    digits[i] = string.char(48 + d)
  end
  local s = table.concat(digits)
  if carry == 1 then s = '1' .. s end
  return s
end

-- The id right after id (as the server writes ids: no leading zeros). The
-- largest id has none: it is returned itself, which keeps that one entry
-- (safe, and unreachable in practice).
local function nextid(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if seq ~= UINT64_MAX then return ms .. '-' .. decinc(seq) end
  if ms ~= UINT64_MAX then return decinc(ms) .. '-0' end
  return id
end

local function trim(keys, args)
  local stream = keys[1]
  if stream == nil then fail(ERRORS.BADARG, 'trim needs 1 key: stream') end
  local limit = argint(args, 1, 'limit', 1, MAX_COUNT)
  local dry = argbool(args, 2, 'dry-run')
  local checks = {{'TYPE', stream}, {'XINFO', 'GROUPS', stream}, {'XPENDING', stream, 'group', '-', '+', '1'},
    {'XRANGE', stream, '-', '+'}, {'XLEN', stream}}
  if not dry then
    checks[#checks + 1] = {'XREVRANGE', stream, '+', '-'}
    checks[#checks + 1] = {'XTRIM', stream, 'MINID', '=', '0-1'}
  end
  allow(checks)
  if not streamkey(stream) then
    fail(ERRORS.NOGROUP, 'stream ' .. stream .. ' does not exist')
  end

  local groups, bound, holder = {}, nil, ''
  for _, g in ipairs(call('XINFO', 'GROUPS', stream)) do
    local name, pending, delivered
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1]
      elseif g[i] == 'pending' then pending = tonumber(g[i + 1])
      elseif g[i] == 'last-delivered-id' then delivered = g[i + 1]
      end
    end
    if name == nil or delivered == nil then
      fail(ERRORS.SERVER, 'XINFO GROUPS: a group without name or last-delivered-id')
    end
    local gbound = nextid(delivered)
    local oldest = ''
    if pending ~= 0 then
      local p = call('XPENDING', stream, name, '-', '+', 1)
      if #p > 0 then
        oldest = p[1][1]
        if idless(oldest, gbound) then gbound = oldest end
      end
    end
    groups[#groups + 1] = {name, pending or 0, oldest, delivered, gbound}
    if bound == nil or idless(gbound, bound) then
      bound, holder = gbound, name
    end
  end
  if bound == nil then
    fail(ERRORS.NOGROUP, 'stream ' .. stream .. ' has no consumer groups: nothing records what its readers have processed, so pelwarden trims nothing (use XTRIM to trim a stream without groups)')
  end

  local trimmed, first, last, more = 0, '', '', 0
  local stop = '(' .. bound
  if dry then
    -- Count in steps of TRIM_CHUNK entries.
    local start = '-'
    while trimmed < limit do
      local k = math.min(TRIM_CHUNK, limit - trimmed)
      local page = call('XRANGE', stream, start, stop, 'COUNT', k + 1)
      if #page == 0 then break end
      local n = math.min(#page, k)
      if first == '' then first = page[1][1] end
      last = page[n][1]
      trimmed = trimmed + n
      if #page > k and trimmed >= limit then more = 1 end
      if #page <= k then break end
      start = '(' .. last
    end
  else
    local head = call('XRANGE', stream, '-', stop, 'COUNT', 1)
    if #head > 0 then
      first = head[1][1]
      -- The greatest id below the bound: the last one trimmed when step 1
      -- removes everything below the bound.
      local greatest = call('XREVRANGE', stream, stop, '-', 'COUNT', 1)[1][1]
      -- 1. Whole stream nodes (radix tree leaves of stream-node-max-entries
      -- entries, 100 by default, or fewer when large) below the bound, at
      -- most limit - 1 entries: freed without reading an entry. The approximate mode removes a node only when all of it is
      -- below the bound, and LIMIT stops before a node that would exceed it.
      if limit > 1 then
        trimmed = call('XTRIM', stream, 'MINID', '~', bound, 'LIMIT', limit - 1)
      end
      -- 2. The rest, exactly, within the budget left (at least 1): what is
      -- left below the bound is at most one node's worth, or the budget is
      -- smaller than the next node. Reading it also names the last id.
      local r = limit - trimmed
      local page = call('XRANGE', stream, '-', stop, 'COUNT', r + 1)
      if #page > r then
        trimmed = trimmed + call('XTRIM', stream, 'MINID', '=', page[r + 1][1])
        last, more = page[r][1], 1
      elseif #page > 0 then
        trimmed = trimmed + call('XTRIM', stream, 'MINID', '=', bound)
        last = page[#page][1]
      else
        last = greatest
      end
    end
  end
  return {trimmed, bound, holder, more, first, last, redis.call('XLEN', stream), groups}
end

------------------------------------------------------------------------------
-- pelwarden_v1_trim_plan: what pelwarden_v1_trim would delete now (read
-- only, so a user with read access to the stream, or a replica, may ask;
-- added in 1.1.0).
--
-- KEYS[1] stream
-- ARGV[1] limit      count at most this many entries, 1..10000
-- Reply and errors: those of pelwarden_v1_trim with dry-run "1".
local function trimplan(keys, args)
  return trim(keys, {argstr(args, 1, 'limit'), '1'})
end

------------------------------------------------------------------------------
-- Partition leases (added in 1.2.0): ordered consumption of a partitioned
-- stream. A partition (one stream) is owned by at most one consumer of a
-- group at a time through a lease kept in a hash next to the stream
-- (fields owner, token, expires; same hash slot). The token is a fencing
-- token: it grows by one each time the lease passes to a consumer that did
-- not hold it with that token, and never goes down (the hash is never
-- deleted by the library: deleting it restarts the tokens, so don't). A
-- call made with a token other than the current one, or by another
-- consumer, changes nothing and reports the lease as not held.
-- Times are the server's clock (TIME), milliseconds.

-- The lease hash's state: owner ('' when free), token, expires (ms), and
-- the blocked head lease_next recorded: { id, deliveries, until } as
-- stored ('' each when none; see lease_next). One HMGET reads them all.
local function leasestate(lease)
  local h = call('HMGET', lease, 'owner', 'token', 'expires', 'blocked', 'blocked_deliveries', 'blocked_until')
  return h[1] or '', tonumber(h[2] or '0') or 0, tonumber(h[3] or '0') or 0,
    {h[4] or '', h[5] or '', h[6] or ''}
end

-- Whether consumer holds the lease with token, and the blocked head as
-- leasestate reads it. An expired lease is still held while nobody took
-- it: the token only moves when another consumer acquires it, so nobody
-- else has run the partition's entries.
local function holds(lease, consumer, token)
  local owner, cur, _, blocked = leasestate(lease)
  return owner == consumer and cur == token and token > 0, blocked
end

-- How far a recomputed blocked_until may move before it is rewritten: it
-- is TIME less the head's idle time plus its delay, and TIME is the real
-- clock while idle counts from the server's cached time, which a busy
-- event loop updates once per round of commands: tens of milliseconds
-- behind on a loaded server (32 ms seen on Redis 7.0). The record is for
-- tools; a second is well within what they show.
local BLOCKED_SLACK_MS = 1000

-- Records the partition's blocked head in the lease hash (id, deliveries,
-- until: the server ms it may be tried again, -1 when it waits for an
-- operator), or clears it (id ''), writing only when that changes what
-- was stored (was, from leasestate): a partition that is not blocked, or
-- stays blocked on the same head, costs no write for it.
local function setblocked(lease, was, id, deliveries, untilms)
  local d, u = '', ''
  if id ~= '' then d, u = tostring(deliveries), tostring(untilms) end
  if was[1] == id and was[2] == d then
    if was[3] == u then return end
    local old = tonumber(was[3])
    if id ~= '' and old ~= nil and old >= 0 and untilms >= 0 and math.abs(old - untilms) <= BLOCKED_SLACK_MS then
      return
    end
  end
  call('HSET', lease, 'blocked', id, 'blocked_deliveries', d, 'blocked_until', u)
end

local function leasekeys(keys, fn)
  local stream, lease = keys[1], keys[2]
  if stream == nil or lease == nil then
    fail(ERRORS.BADARG, fn .. ' needs 2 keys: stream, lease')
  end
  if stream == lease then
    fail(ERRORS.BADARG, 'the lease key must differ from the stream')
  end
  return stream, lease
end

-- The ids of the list that consumer owns in the group's PEL, in list order:
-- one XPENDING over the list's range for consumer (a batch is contiguous,
-- so that is usually all), then one XPENDING per id it did not show (the
-- range held more of consumer's entries than the count, an id written
-- with leading zeros, or an id not consumer's).
local function ownedby(stream, group, consumer, ids)
  if #ids == 0 then return {} end
  local lo, hi = idrange(ids)
  local seen = {}
  for _, p in ipairs(call('XPENDING', stream, group, lo, hi, #ids, consumer)) do seen[p[1]] = true end
  local owned = {}
  for _, id in ipairs(ids) do
    if seen[id] or pendinginfo(stream, group, id) == consumer then owned[#owned + 1] = id end
  end
  return owned
end

-- The ack of ids by the lease holder: the entries it handled since its
-- last call. The token fence already made the caller the partition's only
-- reader (an entry it lists was handed to it and ran to success), so the
-- ids are acked as listed, without an ownership look-up per id. Returns
-- how many were acked (XACK's count: ids no longer pending are skipped).
local function leaseack(stream, group, ids, delete)
  if #ids == 0 then return 0 end
  local n = callids({'XACK', stream, group}, ids)
  if delete then deleteacked(stream, ids) end
  return n
end

-- The fenced give-back of ids by the lease holder: entries a lease_next
-- batch handed out as new that no handler ran. Each one consumer still
-- owns stays pending to it with its delivery count set back to 0 (XCLAIM
-- RETRYCOUNT 0 JUSTID), so the lease_next that hands it out again counts
-- its first attempt as delivery 1. Returns how many were given back.
local function leasegiveback(stream, group, consumer, ids)
  local owned = ownedby(stream, group, consumer, ids)
  if #owned == 0 then return 0 end
  callids({'XCLAIM', stream, group, consumer, 0}, owned, {'RETRYCOUNT', 0, 'JUSTID'})
  return #owned
end

-- The id lists of lease_next and lease_release: ARGV[i] is a count n, the
-- n ids follow. Returns the ids and the index after them.
local function argids(args, i, name)
  local n = argint(args, i, name .. ' count', 0, MAX_COUNT)
  local ids = {}
  for j = 1, n do
    ids[j] = checkid(argstr(args, i + j, name), name)
  end
  return ids, i + n + 1
end

------------------------------------------------------------------------------
-- pelwarden_v1_lease: acquire or renew a partition's lease (added in 1.2.0).
--
-- KEYS[1] stream      the partition
-- KEYS[2] lease       its lease hash (same hash slot as KEYS[1])
-- ARGV[1] group
-- ARGV[2] consumer    the caller
-- ARGV[3] ttl ms      the lease lasts this long from now, 1..2^53
-- The lease is taken when it is free, expired, or already the caller's; a
-- caller that held it keeps its token, anyone else gets token + 1. A lease
-- held by another consumer and not expired is left alone.
-- Reply: { held (1: the caller holds the lease now, 0: another does),
--          owner ('' when free), token, ttl-left ms (0 when expired) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function lease(keys, args)
  local stream, key = leasekeys(keys, 'lease')
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local ttl = argint(args, 3, 'ttl', 1, 2 ^ 53)
  allow({{'TYPE', stream}, {'XPENDING', stream, group}, {'HMGET', key, 'owner'},
    {'HSET', key, 'owner', ''}, {'TIME'}})
  needgroup(stream, group)
  local owner, token, expires = leasestate(key)
  local now = nowms()
  if owner ~= consumer and owner ~= '' and expires > now then
    return {0, owner, token, expires - now}
  end
  if owner ~= consumer or token == 0 then token = token + 1 end
  call('HSET', key, 'owner', consumer, 'token', tostring(token), 'expires', tostring(now + ttl))
  return {1, consumer, token, ttl}
end

------------------------------------------------------------------------------
-- pelwarden_v1_lease_release: give a partition's lease back at once, for a
-- graceful hand-over (added in 1.2.0).
--
-- KEYS[1] stream
-- KEYS[2] lease
-- ARGV[1] group
-- ARGV[2] consumer
-- ARGV[3] token       the caller's token
-- ARGV[4] delete      "1": also delete the acked entries once every group
--                     is done with them
-- ARGV[5] n           how many ack ids follow, 0..MAX_COUNT
-- ARGV[6..5+n]        ids to ack first (as lease_next does): the
--                     entries handled since the last lease_next
-- ARGV[6+n] m         how many give-back ids follow, 0..MAX_COUNT
-- ARGV[7+n..6+n+m]    ids handed out as new and not handled, given back
--                     (see lease_next) for the next owner
-- Reply: { released (1, or 0 when the caller did not hold the lease with
--          that token: nothing changed), acked, given back (counts) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local function leaserelease(keys, args)
  local stream, key = leasekeys(keys, 'lease_release')
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local token = argint(args, 3, 'token', 1, 2 ^ 53)
  local delete = argbool(args, 4, 'delete')
  local acks, i = argids(args, 5, 'ack-id')
  local gives = argids(args, i, 'give-back-id')
  local checks = {{'TYPE', stream}, {'XPENDING', stream, group}, {'HMGET', key, 'owner'}, {'HSET', key, 'owner', ''}}
  if #acks > 0 then
    checks[#checks + 1] = {'XACK', stream, group, '0-0'}
    if delete then deletechecks(checks, stream) end
  end
  if #gives > 0 then checks[#checks + 1] = {'XCLAIM', stream, group, consumer, '0', '0-0'} end
  allow(checks)
  needgroup(stream, group)
  if not holds(key, consumer, token) then return {0, 0, 0} end
  local acked = leaseack(stream, group, acks, delete)
  local given = leasegiveback(stream, group, consumer, gives)
  call('HSET', key, 'owner', '', 'expires', '0')
  return {1, acked, given}
end

------------------------------------------------------------------------------
-- pelwarden_v1_lease_next: the ordered step of a lease holder (added in
-- 1.2.0): ack the entry just handled, renew the lease, and hand out the
-- partition's next entry in stream order.
--
-- KEYS[1] stream
-- KEYS[2] dead-letter stream
-- KEYS[3] lease
-- KEYS[4] last-errors hash optional (since 1.3.0): a record for
--                          max-deliveries keeps the entry's last error
-- ARGV[1] group
-- ARGV[2] consumer
-- ARGV[3] token            the caller's token
-- ARGV[4] ttl ms           the lease is renewed to last this long, 1..2^53
-- ARGV[5] max-deliveries   0 = no limit
-- ARGV[6] delete           "1": delete acked and dead-lettered entries
--                          once every group is done with them
-- ARGV[7] count            0..MAX_COUNT: new entries handed out at most,
--                          when nothing is pending (0: none; the caller
--                          reads them itself, with XREADGROUP in the same
--                          MULTI/EXEC, when the reply says none pending)
-- ARGV[8] n                how many ack ids follow, 0..MAX_COUNT
-- ARGV[9..8+n]             ids handled since the last call: acked first
--                          (the token fence makes the caller the
--                          partition's only reader: no look-up per id)
-- ARGV[9+n] m              how many give-back ids follow, 0..MAX_COUNT
-- ARGV[10+n..9+n+m]        ids a previous call handed out as new that no
--                          handler ran (the rest of a batch behind a head
--                          that failed): each the caller still owns gets
--                          its delivery count set back to 0, so its first
--                          attempt counts as delivery 1
-- ARGV[10+n+m..] backoff ms as in claim: delay before attempt n+1
-- The next entry is the lowest pending id of the group (whoever owns it:
-- the old owner's entries first, in id order), claimed to the caller with
-- its delivery count bumped; only when nothing is pending, up to count new
-- entries (XREADGROUP ... COUNT count ... >), which the caller handles in
-- order and acks with its next call, giving back those behind a head that
-- failed. A pending entry is handed out alone, so every delivery counted
-- is an attempt, but for one case: a crash or a lost lease leaves the rest
-- of a batch counted once and unhandled, and the next owner sees it as
-- delivery 2. A pending head already delivered max-deliveries
-- times is dead-lettered (as claim does) and the next head looked at, at
-- most LEASE_SCAN per call. A head delivered n times and idle less than
-- its backoff delay blocks the partition: it is reported with the time
-- left, and nothing behind it is handed out.
-- The blocked head is also recorded in the lease hash, for tools that are
-- not the owner (the dashboard), in the same call:
--   blocked             the head's id ('' when the partition is not blocked)
--   blocked_deliveries  its deliveries ('' when not blocked)
--   blocked_until       the server ms from which it may be tried again, or
--                       -1: at max-deliveries but too large to dead-letter,
--                       it waits for an operator ('' when not blocked)
-- They are cleared (set to '') by the call that hands an entry out or
-- finds nothing pending, and written only when they change. A call by a
-- caller not holding the lease leaves them alone.
-- Reply: { held (0: the caller does not hold the lease with that token;
--          nothing changed and the rest is empty),
--          acked, given back (counts),
--          { {id, {field, value, ...}, deliveries} } one pending entry,
--          or { {id, {field, value, ...}}, ... } up to count new ones
--          (delivery 1),
--          { id, ... } dead-lettered,
--          { id, ... } deleted from the stream while pending (cleared),
--          blocked head id ('' when none), its wait ms (-1: too large to
--          dead-letter, left for an operator), its deliveries,
--          none pending (1: the scan got past every pending head, so the
--          entries handed out, if any, are new ones and a read of new
--          entries right after this call is next in order; 0 otherwise) }
-- Errors: PWNOGROUP, PWWRONGTYPE, PWBADARG, PWBADID, PWNOPERM, PWSERVER
local LEASE_SCAN = 100
local function leasenext(keys, args)
  local stream, dlq, key = keys[1], keys[2], keys[3]
  if stream == nil or dlq == nil or key == nil then
    fail(ERRORS.BADARG, 'lease_next needs 3 keys: stream, dead-letter stream, lease')
  end
  if stream == dlq or stream == key or dlq == key then
    fail(ERRORS.BADARG, 'the stream, dead-letter stream and lease keys must differ')
  end
  local errkey = errorkey(keys, 4, 'lease_next')
  local group = argname(args, 1, 'group')
  local consumer = argname(args, 2, 'consumer')
  local token = argint(args, 3, 'token', 1, 2 ^ 53)
  local ttl = argint(args, 4, 'ttl', 1, 2 ^ 53)
  local maxdeliveries = argint(args, 5, 'max-deliveries', 0, 2 ^ 53)
  local delete = argbool(args, 6, 'delete')
  local count = argint(args, 7, 'count', 0, MAX_COUNT)
  local acks, i = argids(args, 8, 'ack-id')
  local gives
  gives, i = argids(args, i, 'give-back-id')
  local backoff = {}
  for j = i, #args do
    backoff[#backoff + 1] = argint(args, j, 'backoff', 0, 2 ^ 53)
  end
  local checks = {{'TYPE', stream}, {'TYPE', dlq}, {'XPENDING', stream, group}, {'XACK', stream, group, '0-0'},
    {'HMGET', key, 'owner'}, {'HSET', key, 'owner', ''}, {'TIME'},
    {'XCLAIM', stream, group, consumer, '0', '0-0'}, {'XREADGROUP', 'GROUP', group, consumer, 'STREAMS', stream, '>'}}
  if maxdeliveries > 0 then
    checks[#checks + 1] = {'XRANGE', stream, '-', '+'}
    checks[#checks + 1] = {'XADD', dlq, '*', 'f', 'v'}
  end
  if delete then deletechecks(checks, stream) end
  errorchecks(checks, errkey, false)
  allow(checks)
  needgroup(stream, group)
  streamkey(dlq)
  errorhash(errkey)
  local held, was = holds(key, consumer, token)
  if not held then return {0, 0, 0, {}, {}, {}, '', 0, 0, 0} end
  local now = nowms()
  call('HSET', key, 'expires', tostring(now + ttl))
  local acked = leaseack(stream, group, acks, delete)
  local given = leasegiveback(stream, group, consumer, gives)

  local dead, deleted = {}, {}
  -- Every return below drops the last errors of what was dead-lettered
  -- or cleared.
  local function out(reply)
    forgeterrors(errkey, group, dead)
    forgeterrors(errkey, group, deleted)
    return reply
  end
  for _, p in ipairs(call('XPENDING', stream, group, '-', '+', LEASE_SCAN)) do
    local id, owner, idle, deliveries = p[1], p[2], tonumber(p[3]), tonumber(p[4])
    if maxdeliveries > 0 and deliveries >= maxdeliveries then
      local done = deadletterone(stream, dlq, group, id, owner, deliveries, REASON_MAX_DELIVERIES,
        lasterror(errkey, group, id), now, delete)
      if done == 'deleted' then
        deleted[#deleted + 1] = id
      elseif done == 'toolarge' then
        setblocked(key, was, id, deliveries, -1)
        return out({1, acked, given, {}, dead, deleted, id, -1, deliveries, 0})
      else
        dead[#dead + 1] = id
      end
    else
      local delay = retrydelay(backoff, deliveries)
      if idle < delay then
        setblocked(key, was, id, deliveries, now - idle + delay)
        return out({1, acked, given, {}, dead, deleted, id, delay - idle, deliveries, 0})
      end
      local c = call('XCLAIM', stream, group, consumer, 0, id)
      if #c == 0 or type(c[1][2]) ~= 'table' then
        call('XACK', stream, group, id)
        deleted[#deleted + 1] = id
      else
        setblocked(key, was, '')
        return out({1, acked, given, {{id, c[1][2], deliveries + 1}}, dead, deleted, '', 0, 0, 0})
      end
    end
  end
  -- No head blocks the partition (the scan got past every one it met).
  setblocked(key, was, '')
  if #dead + #deleted >= LEASE_SCAN then
    -- The scan budget is spent: the caller asks again.
    return out({1, acked, given, {}, dead, deleted, '', 0, 0, 0})
  end
  -- New entries go out as XREADGROUP returned them, {id, fields} (their
  -- delivery is the first), without a table built per entry.
  local live = {}
  if count == 0 then return out({1, acked, given, live, dead, deleted, '', 0, 0, 1}) end
  local r = call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, '>')
  if type(r) == 'table' and r[1] ~= nil then live = r[1][2] end
  return out({1, acked, given, live, dead, deleted, '', 0, 0, 1})
end

------------------------------------------------------------------------------
-- Limits (added in 1.4.0): a rate and a concurrency cap shared by every
-- consumer that names the limit, kept on the server's clock.
--
-- KEYS[1] the limit's hash: its settings (rate-milli: permits per 1000 s,
--         i.e. per second x 1000; burst; concurrency; lease-ms) and state
--         (tat: the rate's theoretical arrival time, ms; in-use: the cap's
--         permits held; token: the last lease token; "lease:<token>": the
--         permits each lease holds)
-- KEYS[2] the limit's leases: a sorted set of lease tokens scored by the
--         time they expire (ms)
-- Both in one cluster slot (the Go side names them, LimitKeysFor).
--
-- The rate is a GCRA, a token bucket kept in one timestamp: a permit every
-- 1000/rate ms, at most burst at once. Every holder asking for permits
-- has a lease: its first acquire makes one, every later one renews it,
-- and the cap's permits it takes are added to it; a lease not renewed
-- within lease-ms expires and its permits come back, so a crashed
-- consumer leaks nothing for longer than that. The live leases are the
-- holders the permits are shared by, fairly (see limit_acquire). A release names its lease's token: permits of a lease that
-- expired meanwhile are not given back twice (they came back at expiry).

local LIMIT_EXPIRE_SCAN = 100 -- expired leases collected per call

local function limitkeys(keys, fn)
  local h, z = keys[1], keys[2]
  if h == nil or z == nil then
    fail(ERRORS.BADARG, fn .. ' needs 2 keys: the limit hash and its leases')
  end
  if h == z then fail(ERRORS.BADARG, 'the limit hash and its leases must differ') end
  for _, k in ipairs({h, z}) do
    local t = call('TYPE', k)['ok']
    local want = (k == h) and 'hash' or 'zset'
    if t ~= 'none' and t ~= want then
      fail(ERRORS.WRONGTYPE, 'key ' .. k .. ' holds a ' .. t .. ', not a ' .. want)
    end
  end
  return h, z
end

local function limitchecks(h, z, write)
  local checks = {{'TYPE', h}, {'TYPE', z}, {'HMGET', h, 'f'}, {'HGET', h, 'f'},
    {'ZRANGEBYSCORE', z, '0', '0'}, {'ZCOUNT', z, '0', '0'}, {'TIME'}}
  if write then
    checks[#checks + 1] = {'HSET', h, 'f', 'v'}
    checks[#checks + 1] = {'HINCRBY', h, 'f', '1'}
    checks[#checks + 1] = {'HDEL', h, 'f'}
    checks[#checks + 1] = {'ZADD', z, '0', 'm'}
    checks[#checks + 1] = {'ZREM', z, 'm'}
  end
  allow(checks)
end

-- The settings and state of a limit; nil when it was never set.
local function limitread(h)
  local v = call('HMGET', h, 'rate-milli', 'burst', 'concurrency', 'lease-ms', 'tat', 'in-use')
  if v[1] == false then return nil end
  return {rate = tonumber(v[1]), burst = tonumber(v[2]), conc = tonumber(v[3]),
    lease = tonumber(v[4]), tat = tonumber(v[5] or '0') or 0, inuse = tonumber(v[6] or '0') or 0}
end

local function needlimit(h)
  local l = limitread(h)
  if l == nil then
    fail(ERRORS.NOLIMIT, 'limit ' .. h .. ' is not set (pelwarden limit set, or Library.SetLimit)')
  end
  return l
end

-- The rate's interval between permits (ms); nil without a rate.
local function limitinterval(l)
  if l.rate > 0 then return 1000000 / l.rate end
  return nil
end

-- The rate's permits available at now (a large number without a rate).
local function rateavailable(l, now)
  local t = limitinterval(l)
  if t == nil then return MAX_COUNT end
  local tat = math.max(l.tat, now)
  return math.max(0, math.floor((now + l.burst * t - tat) / t + 1e-9))
end

-- Collects up to LIMIT_EXPIRE_SCAN expired leases: their permits come back.
local function limitexpire(h, z, l, now)
  local gone = call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, LIMIT_EXPIRE_SCAN)
  if #gone == 0 then return end
  local freed = 0
  for _, token in ipairs(gone) do
    freed = freed + (tonumber(call('HGET', h, 'lease:' .. token)) or 0)
    call('HDEL', h, 'lease:' .. token)
  end
  callids({'ZREM', z}, gone)
  l.inuse = math.max(0, l.inuse - freed)
  call('HSET', h, 'in-use', l.inuse)
end

-- The show reply: { "rate-milli", r, "burst", b, "concurrency", c,
-- "lease-ms", l, "in-use", n, "leases", n, "available", n (rate permits
-- available now; -1 without a rate) } or {} when the limit is not set.
local function limitshowreply(h, z, l, now)
  -- Leases expired but not collected yet hold nothing any more.
  local expired = 0
  for _, token in ipairs(call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 1000)) do
    expired = expired + (tonumber(call('HGET', h, 'lease:' .. token)) or 0)
  end
  local available = -1
  if l.rate > 0 then available = rateavailable(l, now) end
  return {'rate-milli', l.rate, 'burst', l.burst, 'concurrency', l.conc, 'lease-ms', l.lease,
    'in-use', math.max(0, l.inuse - expired), 'leases', call('ZCOUNT', z, '(' .. now, '+inf'),
    'available', available}
end

------------------------------------------------------------------------------
-- pelwarden_v1_limit_set: create or change a limit (added in 1.4.0).
--
-- KEYS[1] limit hash, KEYS[2] its leases
-- ARGV[1] rate-milli    permits per second x 1000, 0..10^12 (0: no rate)
-- ARGV[2] burst         permits at once, 1..10^9 (with a rate)
-- ARGV[3] concurrency   permits held at once, 0..10^9 (0: no cap)
-- ARGV[4] lease-ms      how long a lease lasts unless renewed, 100..86400000
-- A limit needs a rate or a cap. A change applies to the next acquire;
-- permits held stay held (a lower cap takes no more until enough come back).
-- Reply: the show reply.
-- Errors: PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function limitset(keys, args)
  local h, z = limitkeys(keys, 'limit_set')
  local rate = argint(args, 1, 'rate-milli', 0, 10 ^ 12)
  local burst = argint(args, 2, 'burst', 1, 10 ^ 9)
  local conc = argint(args, 3, 'concurrency', 0, 10 ^ 9)
  local lease = argint(args, 4, 'lease-ms', 100, 86400000)
  if rate == 0 and conc == 0 then fail(ERRORS.BADARG, 'a limit needs a rate or a concurrency cap') end
  limitchecks(h, z, true)
  call('HSET', h, 'rate-milli', rate, 'burst', burst, 'concurrency', conc, 'lease-ms', lease)
  local l = limitread(h)
  local now = nowms()
  limitexpire(h, z, l, now)
  return limitshowreply(h, z, l, now)
end

------------------------------------------------------------------------------
-- pelwarden_v1_limit_acquire: take permits, renew a lease (added in 1.4.0).
--
-- KEYS[1] limit hash, KEYS[2] its leases
-- ARGV[1] want     permits wanted, 0..MAX_COUNT (0: only renew the lease)
-- ARGV[2] token    the caller's lease ("0": none yet); it is renewed, and
--                  the cap's permits taken are added to it
-- ARGV[3] horizon  optional, ms, 0..60000 (default 0): rate permits that
--                  come due within this long are granted now, each with
--                  its time (see first-us), so a holder takes a batch for
--                  the time ahead in one call and starts each on time
-- ARGV[4] release  optional, 0..10^9 (default 0): the cap's permits of the
--                  lease to give back first (handlers done), as
--                  limit_release does, so a holder's next acquire carries
--                  them without a call of its own
-- ARGV[5] refund   optional, 0..MAX_COUNT (default 0): the rate's permits
--                  taken and not used, given back first, as limit_release
-- Every caller that asks for permits holds a lease (its token) while it
-- keeps calling: the live leases are the holders the permits are shared
-- by. One call takes at most a fair share of the rate (ceil((burst +
-- horizon's permits) / holders)), and a lease holds at most a fair share
-- of the cap (ceil(concurrency / holders)), so every holder that keeps
-- asking gets its turn. It takes min(want, what the rate allows, what the
-- cap has free, the shares): as many as it can, never more. With more
-- than one holder the rate's permits go a share at a time: a call that
-- finds fewer than min(want, its share) due within its horizon takes none
-- and is told when they are, so a holder that calls often cannot take the
-- permits the others wait for piecemeal.
-- Reply: { granted,
--          token       the caller's lease (0 only for a call with want 0
--                      and no live lease)
--          lost        1: ARGV token's lease had expired (its permits came
--                      back to the limit; a new lease holds the new ones)
--          wait-ms     0 when every wanted permit was granted; else the time
--                      until the rate allows a share more, or -1 when the
--                      cap (or the lease's share of it) is full: a release
--                      or an expiry frees some,
--          in-use      the cap's permits held now,
--          first-us    the rate's permit k (0-based) of this grant comes
--                      due max(0, first-us + k x interval-us) microseconds
--                      from now (first-us may be negative: permits due
--                      already; 0 without a rate),
--          interval-us the rate's interval between permits (0 without),
--          share       the cap's permits this lease may hold (0 without a
--                      cap),
--          held        the cap's permits the lease holds after the call }
-- Errors: PWNOLIMIT, PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function limitacquire(keys, args)
  local h, z = limitkeys(keys, 'limit_acquire')
  local want = argint(args, 1, 'want', 0, MAX_COUNT)
  local token = argint(args, 2, 'token', 0, 2 ^ 53)
  local horizon, release, refund = 0, 0, 0
  if args[3] ~= nil then horizon = argint(args, 3, 'horizon', 0, 60000) end
  if args[4] ~= nil then release = argint(args, 4, 'release', 0, 10 ^ 9) end
  if args[5] ~= nil then refund = argint(args, 5, 'refund', 0, MAX_COUNT) end
  limitchecks(h, z, true)
  local l = needlimit(h)
  local now = nowms()
  limitexpire(h, z, l, now)
  local lost = 0
  local held = 0
  if token > 0 then
    local v = call('HGET', h, 'lease:' .. token)
    if v then
      held = tonumber(v)
      call('ZADD', z, 'XX', now + l.lease, token)
      local back = math.min(held, release)
      if back > 0 then
        held = held - back
        call('HSET', h, 'lease:' .. token, held)
        l.inuse = math.max(0, l.inuse - back)
        call('HSET', h, 'in-use', l.inuse)
      end
    else
      lost = 1
      token = 0
    end
  end
  if refund > 0 and l.rate > 0 and l.tat > now then
    l.tat = math.max(now, l.tat - refund * limitinterval(l))
    call('HSET', h, 'tat', string.format('%.3f', l.tat))
  end
  if token == 0 and want > 0 then
    token = call('HINCRBY', h, 'token', 1)
    call('ZADD', z, now + l.lease, token)
    call('HSET', h, 'lease:' .. token, 0)
  end
  local holders = math.max(1, call('ZCOUNT', z, '(' .. now, '+inf'))
  local t = limitinterval(l)
  local n = want
  local rateshare = want
  local first = 0
  if t ~= nil then
    local avail = math.max(0, math.floor((now + horizon + l.burst * t - math.max(l.tat, now)) / t + 1e-9))
    rateshare = math.max(1, math.ceil((l.burst + math.floor(horizon / t)) / holders))
    if holders > 1 and avail < math.min(want, rateshare) then
      avail = 0 -- a share at a time among holders (see above)
    end
    n = math.min(n, avail, rateshare)
    first = math.max(l.tat, now) - now - (l.burst - 1) * t
  end
  local capfull = false
  local share = 0
  if l.conc > 0 then
    share = math.max(1, math.ceil(l.conc / holders))
    local free = math.max(0, math.min(l.conc - l.inuse, share - held))
    if free < n then n = free; capfull = true end
  end
  if n > 0 then
    if t ~= nil then
      l.tat = math.max(l.tat, now) + n * t
      call('HSET', h, 'tat', string.format('%.3f', l.tat))
    end
    if l.conc > 0 then
      held = held + n
      call('HINCRBY', h, 'lease:' .. token, n)
      l.inuse = l.inuse + n
      call('HSET', h, 'in-use', l.inuse)
    end
  end
  local wait = 0
  if n < want then
    if capfull or t == nil then
      wait = -1
    else
      -- A share more comes due within the horizon once
      -- tat + (k - burst) x t <= now + horizon.
      local k = math.min(want, rateshare)
      wait = math.max(1, math.ceil(l.tat + (k - l.burst) * t - now - horizon))
    end
  end
  local first_us, interval_us = 0, 0
  if t ~= nil then
    first_us = math.floor(first * 1000 + 0.5)
    interval_us = math.floor(t * 1000 + 0.5)
  end
  return {n, token, lost, wait, l.inuse, first_us, interval_us, share, held}
end

------------------------------------------------------------------------------
-- pelwarden_v1_limit_release: give permits back (added in 1.4.0).
--
-- KEYS[1] limit hash, KEYS[2] its leases
-- ARGV[1] token    the lease the cap's permits are held under (0: none)
-- ARGV[2] permits  the cap's permits to give back (handlers done), 0..10^9
-- ARGV[3] refund   rate permits taken and not used, 0..MAX_COUNT: the rate
--                  gets them back (never more than the time since now)
-- ARGV[4] end      optional, 0 or 1 (default 0): 1 ends the lease (the
--                  holder stops asking), giving back every permit it holds
-- A lease that gave its permits back stays a holder until it ends or
-- expires (see limit_acquire's shares).
-- Reply: { released (the cap's permits given back),
--          not-held (asked for but not held by the lease: it expired, and
--                    they came back then) }
-- Errors: PWNOLIMIT, PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function limitrelease(keys, args)
  local h, z = limitkeys(keys, 'limit_release')
  local token = argint(args, 1, 'token', 0, 2 ^ 53)
  local permits = argint(args, 2, 'permits', 0, 10 ^ 9)
  local refund = argint(args, 3, 'refund', 0, MAX_COUNT)
  local finish = false
  if args[4] ~= nil then finish = argbool(args, 4, 'end') end
  limitchecks(h, z, true)
  local l = needlimit(h)
  local now = nowms()
  limitexpire(h, z, l, now)
  local released = 0
  local v = false
  if token > 0 then v = call('HGET', h, 'lease:' .. token) end
  if v then
    local held = tonumber(v)
    released = math.min(held, permits)
    if finish then
      released = held
      call('HDEL', h, 'lease:' .. token)
      call('ZREM', z, token)
      l.inuse = math.max(0, l.inuse - held)
      call('HSET', h, 'in-use', l.inuse)
    elseif released > 0 then
      call('HINCRBY', h, 'lease:' .. token, -released)
      l.inuse = math.max(0, l.inuse - released)
      call('HSET', h, 'in-use', l.inuse)
    end
  end
  local t = limitinterval(l)
  if refund > 0 and t ~= nil and l.tat > now then
    l.tat = math.max(now, l.tat - refund * t)
    call('HSET', h, 'tat', string.format('%.3f', l.tat))
  end
  return {released, math.max(0, permits - released)}
end

------------------------------------------------------------------------------
-- pelwarden_v1_limit_show: a limit's settings and use (read only; added
-- in 1.4.0).
--
-- KEYS[1] limit hash, KEYS[2] its leases
-- Reply: the show reply (see limitshowreply), {} when the limit is not set.
-- Errors: PWWRONGTYPE, PWBADARG, PWNOPERM, PWSERVER
local function limitshow(keys, args)
  local h, z = limitkeys(keys, 'limit_show')
  limitchecks(h, z, false)
  local l = limitread(h)
  if l == nil then return {} end
  return limitshowreply(h, z, l, nowms())
end

------------------------------------------------------------------------------
-- pelwarden_v1_version: the library's version, e.g. "1.1.0" (read only).
--
-- KEYS: none. ARGV: none.
-- Reply: the version string.
local function version(keys, args)
  return LIBRARY_VERSION
end

-- The function table, read by the registration below and, under EVALSHA,
-- by lua/shim.lua (which replaces the registration).
--
-- allow-oom (since 1.0.4): ack, extend, release, fail and giveback (1.3.0;
-- fail's HSET of a bounded error text is the one write that may grow
-- memory, kept so that a full server still takes failures back), reap and
-- trim (1.1.0)
-- only acknowledge, re-time or delete what is already there, so they run
-- on a server at maxmemory (noeviction) too: a full server must not keep a
-- consumer from settling the entries it holds, nor an operator from
-- trimming what every group is done with. lease and lease_release (1.2.0)
-- only re-time or free a lease (and ack), so they run there too, and a
-- graceful stop can still hand its partitions over. claim (it may
-- dead-letter), lease_next (it may too), deadletter and
-- redrive add entries and stay refused there. Under EVALSHA no script has
-- flags: the server then refuses only commands that grow memory (XADD), so
-- the same split holds.
local FUNCTIONS = {
  {name = 'pelwarden_v1_claim', fn = claim, flags = {}},
  {name = 'pelwarden_v1_ack', fn = ack, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_deadletter', fn = deadletter, flags = {}},
  {name = 'pelwarden_v1_extend', fn = extend, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_release', fn = release, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_fail', fn = failed, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_giveback', fn = giveback, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_reap', fn = reap, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_redrive', fn = redrive, flags = {}},
  {name = 'pelwarden_v1_stats', fn = stats, flags = {'no-writes'}},
  {name = 'pelwarden_v1_trim', fn = trim, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_trim_plan', fn = trimplan, flags = {'no-writes'}},
  {name = 'pelwarden_v1_version', fn = version, flags = {'no-writes'}},
  {name = 'pelwarden_v1_lease', fn = lease, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_lease_release', fn = leaserelease, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_lease_next', fn = leasenext, flags = {}},
  {name = 'pelwarden_v1_limit_set', fn = limitset, flags = {}},
  {name = 'pelwarden_v1_limit_acquire', fn = limitacquire, flags = {}},
  {name = 'pelwarden_v1_limit_release', fn = limitrelease, flags = {'allow-oom'}},
  {name = 'pelwarden_v1_limit_show', fn = limitshow, flags = {'no-writes'}},
}
-- @@register (everything below is replaced by lua/shim.lua under EVALSHA)
-- The load-time environment is minimal (no ipairs on Redis 7.0): plain loop.
for i = 1, #FUNCTIONS do
  local f = FUNCTIONS[i]
  redis.register_function{function_name = f.name, callback = f.fn, flags = f.flags}
end

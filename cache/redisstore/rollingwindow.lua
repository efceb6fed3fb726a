-- Rolling-window state of one logical key, all rules at once, in one atomic step.
-- Mirrors rollingwindow.Log: per counter, buckets of granularity G keep a count and their latest
-- instant; a bucket counts until latest + W; the counter's time (hw) never goes backwards.
--
-- KEYS: per slot j, KEYS[2j-1] a sorted set (member: bucket index, score: latest instant) and
--       KEYS[2j] a hash: "b"..index → count, "t" total, "hw" time, "lo" a lower bound of the
--       oldest bucket's latest instant (pruning is due when lo + W <= time), "x" the instant
--       both keys are kept until (their TTL, refreshed only when it falls short), "rr" and
--       "ra" the remaining count the upstream last reported and when, "off" the key's clock
--       offset (absent: 0); then last, the key's pause: a string "<until> <off>" (or, as
--       written before offsets, "<until>"), the instant reservations are held until and the
--       clock offset, expiring after it.
-- ARGV: op ("record" | "reserve" | "admit" | "peek" | "release" | "sync"), n (for sync: the pause),
--       now override in µs ("" for Redis TIME), at (µs, for release), the step tolerance
--       (strategy.StepTolerance, µs), slot count, then per
--       slot W, G, slack (µs), then rule count, then per rule its slot (1-based) and effective
--       limit; for sync, then the report count and per report its slot, remaining, used and
--       reset (µs, 0 when unknown).
-- Returns: record/release {now}; reserve {allowed, wait, at}; peek {wait, now, used...,
--       paused until (0 when not paused), then per rule reported remaining and its instant
--       (-1 and 0 when none)}; sync {at}; admit {allowed, wait, 0, at, then per rule used,
--       reset, 0} (the zeros are the ns parts of the durations, as the other scripts return
--       them). µs.
-- Each slot costs one HMGET, and for writes a ZADD and an HSET, and the key one GET (its pause);
-- pruning, TTL refreshes and a bucket other than the one guessed at load are rare extra calls.
--
-- Clock steps (strategy.Rebase, DESIGN §9). Every instant of a key (hw, bucket instants, the
-- pause, "ra", "x", the at of a release) is on the key's own timeline: Redis TIME (or the
-- override) plus the key's clock offset, the largest "off" its keys hold. When that instant is
-- more than the step tolerance behind the latest instant the key's slots have seen, the clock
-- was stepped back: the offset is raised so that the key's instant is that latest instant, and
-- written to every key the operation writes (refusals and peeks included), so that the next
-- operation finds it rather than detecting the step again. The buckets are not rewritten (a
-- day's sorted set would be too costly); nothing that counts moves, and every wait told holds
-- on the new clock. TTLs are durations, so on Redis's own clock.

local op = ARGV[1]
local n = tonumber(ARGV[2])
local raw -- the store's clock, µs
if ARGV[3] ~= '' then
  raw = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  raw = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local STEP = tonumber(ARGV[5])
-- the key's clock offset: the largest its keys hold, raised by settle on a step back
local off = 0
-- the key's instant, raw + off; set by settle, which every operation calls once it has loaded
local now = raw
local nslots = tonumber(ARGV[6])
local W, G, S = {}, {}, {}
local p = 7
for j = 1, nslots do
  W[j], G[j], S[j] = tonumber(ARGV[p]), tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])
  p = p + 3
end
local nrules = tonumber(ARGV[p])
p = p + 1
local RS, RL = {}, {}
for i = 1, nrules do
  RS[i], RL[i] = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  p = p + 2
end

-- Redis arguments from Lua numbers go through "%.14g", which rounds µs instants: format them.
local function int(x)
  return string.format('%d', x)
end

-- Exact integer division for instants below 2^53 (fmod is exact on doubles).
local function bucket(t, g)
  return int((t - math.fmod(t, g)) / g)
end

-- per slot: hw, total, lo, x, the count of one bucket asked for, and the fields to write back
local st = {}

local function load(j, field)
  local v
  if op == 'peek' then -- only a peek answers with the reported figures
    v = redis.call('HMGET', KEYS[2 * j], 'hw', 't', 'lo', 'x', 'off', field, 'rr', 'ra')
  else
    v = redis.call('HMGET', KEYS[2 * j], 'hw', 't', 'lo', 'x', 'off', field)
  end
  st[j] = {hw = tonumber(v[1]), total = tonumber(v[2]) or 0, lo = tonumber(v[3]), x = tonumber(v[4]),
    off = tonumber(v[5]) or 0, field = field, count = tonumber(v[6]) or 0, rr = tonumber(v[7]),
    ra = tonumber(v[8]), skip = 0, set = {}}
  if st[j].off > off then off = st[j].off end
end

-- the field of the bucket of slot j that holds the key's instant, as far as the keys loaded so
-- far tell it (add reads another bucket when the one recorded in differs)
local function guess(j)
  return 'b' .. bucket(raw + off, G[j])
end

-- the key's pause as stored: until (0 when none) and its offset
local pause = {until_ = 0, off = 0}

local function load_pause()
  local v = redis.call('GET', KEYS[2 * nslots + 1])
  if not v then return end
  local u, o = string.match(v, '^(%d+) (%d+)$')
  pause.until_, pause.off, pause.present = tonumber(u or v) or 0, tonumber(o) or 0, true
  if pause.off > off then off = pause.off end
end

-- the instant the key's pause ends; 0 when it has none
local function paused_until()
  return pause.until_
end

-- Set the key's instant (now) from the offset loaded, rebase the key when its clock stepped
-- back (see the top), and return the latest of now and every slot's time: the instant
-- operations that move the key's time are decided at. Call after every load.
local function settle()
  local hw
  now, off, hw = key_instant(raw, off, st, nslots, STEP)
  if pause.present and pause.off ~= off then
    -- the pause ends at the same instant of the key's timeline, so its TTL stays
    redis.call('SET', KEYS[2 * nslots + 1], int(pause.until_) .. ' ' .. int(off), 'KEEPTTL')
    pause.off = off
  end
  if hw ~= nil and hw > now then return hw end
  return now
end

-- Move slot j's time to t if later and drop what stops counting there. With write unset
-- nothing is deleted: the dead buckets are only left out (skip) of the answers.
local function advance(j, t, write)
  local s = st[j]
  if s.hw == nil or t > s.hw then
    s.hw = t
    if write then s.set.hw = int(t) end
  end
  t = s.hw
  if s.pruned or s.lo == nil or s.lo + W[j] > t then return t end
  s.pruned = true -- once per run: rules sharing a slot must not subtract twice
  local z, h, cut = KEYS[2 * j - 1], KEYS[2 * j], int(t - W[j])
  local off = 0
  while true do
    local dead = redis.call('ZRANGEBYSCORE', z, '-inf', cut, 'LIMIT', write and 0 or off, 1000)
    if #dead == 0 then break end
    local fields = {}
    for i = 1, #dead do fields[i] = 'b' .. dead[i] end
    local counts = redis.call('HMGET', h, unpack(fields))
    for i = 1, #counts do s.total = s.total - (tonumber(counts[i]) or 0) end
    if write then
      redis.call('HDEL', h, unpack(fields))
      redis.call('ZREM', z, unpack(dead))
    else
      off = off + #dead
    end
  end
  s.skip = off
  if write then
    local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
    s.lo = tonumber(first[2])
    s.set.t = int(s.total)
    s.set.lo = s.lo and int(s.lo) or '0'
    if s.lo == nil then s.set.lo = nil; redis.call('HDEL', h, 'lo') end
  end
  return t
end

-- record k at t; a record dated so early it would no longer count at the slot's time counts
-- at that time instead (never dropped, as rollingwindow.Log.Add)
local function add(j, t, k)
  local s = st[j]
  local hw = advance(j, t, true)
  if t + W[j] <= hw then t = hw end
  local m = bucket(t, G[j])
  local f = 'b' .. m
  if f ~= s.field then
    -- a bucket this run has written is read from its pending write
    s.count = tonumber(s.set[f]) or tonumber(redis.call('HGET', KEYS[2 * j], f)) or 0
    s.field = f
  end
  redis.call('ZADD', KEYS[2 * j - 1], 'GT', int(t), m)
  s.count = s.count + k
  s.total = s.total + k
  s.set[f] = int(s.count)
  s.set.t = int(s.total)
  if s.lo == nil or t < s.lo then
    s.newz = s.lo == nil
    s.lo = t
    s.set.lo = int(t)
  end
end

-- smallest d >= 0 with used(t+d) + k <= limit, measured from the slot's time
local function wait(j, t, k, limit, write)
  local s = st[j]
  t = advance(j, t, write)
  local excess = s.total + k - limit
  if excess <= 0 then return 0 end
  local freed, off = 0, s.skip
  while true do
    local items = redis.call('ZRANGE', KEYS[2 * j - 1], off, off + 99, 'WITHSCORES')
    if #items == 0 then return W[j] end
    local fields = {}
    for i = 1, #items, 2 do fields[#fields + 1] = 'b' .. items[i] end
    local counts = redis.call('HMGET', KEYS[2 * j], unpack(fields))
    for i = 1, #counts do
      freed = freed + (tonumber(counts[i]) or 0)
      if freed >= excess then return tonumber(items[2 * i]) + W[j] - t end
    end
    off = off + 100
  end
end

local function layered_wait(t, k, write)
  local d = 0
  for i = 1, nrules do
    d = math.max(d, wait(RS[i], t, k, RL[i], write))
  end
  return d
end

-- write back each slot's changed fields; refresh the TTL of both keys when it would end before
-- the slot's newest request stops counting, to that instant plus slack
local function save()
  for j = 1, nslots do
    local s = st[j]
    local z, h = KEYS[2 * j - 1], KEYS[2 * j]
    if s.hw ~= nil and s.off ~= off then s.set.off = int(off) end
    if next(s.set) ~= nil and s.hw ~= nil then
      if s.x == nil or s.x < s.hw + W[j] or s.newz then
        local x = s.hw + W[j] + S[j]
        local ms = int(math.ceil((x - now) / 1000))
        s.set.x = int(x)
        local args = {}
        for f, v in pairs(s.set) do args[#args + 1] = f; args[#args + 1] = v end
        redis.call('HSET', h, unpack(args))
        redis.call('PEXPIRE', h, ms)
        redis.call('PEXPIRE', z, ms)
      else
        local args = {}
        for f, v in pairs(s.set) do args[#args + 1] = f; args[#args + 1] = v end
        redis.call('HSET', h, unpack(args))
      end
    end
  end
end

if op == 'peek' then
  -- A key with state keeps the time of the peek, as every operation does: were Redis TIME to
  -- step back, usage that had stopped counting must not count again.
  load_pause()
  local exists = false
  for j = 1, nslots do
    load(j, 'hw')
    if st[j].hw ~= nil then exists = true end
  end
  local t = settle()
  local out = {0, now}
  if n > 0 then
    out[1] = layered_wait(now, n, exists)
    -- measured from the caller's instant (strategy.StepTolerance)
    if out[1] > 0 then out[1] = out[1] + t - now end
  end
  for i = 1, nrules do
    advance(RS[i], now, exists)
    out[2 + i] = st[RS[i]].total
  end
  local pu = paused_until()
  if pu > now then
    out[3 + nrules] = pu
    if n > 0 then out[1] = math.max(out[1], pu - now) end
  else
    out[3 + nrules] = 0
  end
  for i = 1, nrules do
    local s = st[RS[i]]
    -- a figure about a window that has passed says nothing any more
    if s.rr ~= nil and s.ra ~= nil and s.ra + W[RS[i]] > now then
      out[2 + nrules + 2 * i] = s.rr
      out[3 + nrules + 2 * i] = s.ra
    else
      out[2 + nrules + 2 * i] = -1
      out[3 + nrules + 2 * i] = 0
    end
  end
  if exists then save() end
  return out
end

if op == 'record' then
  load_pause()
  for j = 1, nslots do load(j, guess(j)) end
  settle()
  for j = 1, nslots do add(j, now, n) end
  save()
  return {now}
end

if op == 'reserve' then
  load_pause()
  for j = 1, nslots do load(j, guess(j)) end
  local t = settle()
  local d = layered_wait(t, n, true)
  local pu = paused_until()
  if pu > t then d = math.max(d, pu - t) end
  if d == 0 then
    for j = 1, nslots do add(j, t, n) end
  end
  save()
  -- the wait is measured from the caller's instant (strategy.StepTolerance)
  if d > 0 then return {0, d + t - now, t} end
  return {1, 0, t}
end

-- time from t until slot j counts nothing: its newest bucket that holds a count leaving the
-- window (rollingwindow.Log.WaitTime(t, limit, limit)); the slot is pruned and saved
local function reset(j, t)
  local off = 0
  while true do
    local items = redis.call('ZREVRANGE', KEYS[2 * j - 1], off, off + 99, 'WITHSCORES')
    if #items == 0 then return W[j] end
    local fields = {}
    for i = 1, #items, 2 do fields[#fields + 1] = 'b' .. items[i] end
    local counts = redis.call('HMGET', KEYS[2 * j], unpack(fields))
    for i = 1, #counts do
      if (tonumber(counts[i]) or 0) > 0 then return tonumber(items[2 * i]) + W[j] - t end
    end
    off = off + 100
  end
end

if op == 'admit' then
  -- strategy.Strategy.Admit: Reserve's decision (a pause does not hold a server's admissions),
  -- then every rule's used count and reset at the decision's instant
  load_pause()
  for j = 1, nslots do load(j, guess(j)) end
  local t = settle()
  local sk = t - now -- waits are measured from the caller's instant (strategy.StepTolerance)
  local d = layered_wait(t, n, true)
  if d == 0 then
    for j = 1, nslots do add(j, t, n) end
  end
  local out = {d == 0 and 1 or 0, d > 0 and d + sk or 0, 0, t}
  for i = 1, nrules do advance(RS[i], t, true) end
  save()
  for i = 1, nrules do
    local used = st[RS[i]].total
    local r = used > 0 and reset(RS[i], t) or 0
    out[#out + 1] = used
    out[#out + 1] = r > 0 and r + sk or 0
    out[#out + 1] = 0
  end
  return out
end

if op == 'release' then
  local at = tonumber(ARGV[4])
  load_pause()
  for j = 1, nslots do load(j, 'b' .. bucket(at, G[j])) end
  settle()
  for j = 1, nslots do
    local s = st[j]
    local k = math.min(n, s.count)
    if k > 0 then
      s.set[s.field] = int(s.count - k)
      s.set.t = int(s.total - k)
    end
  end
  save()
  return {now}
end

if op == 'sync' then
  load_pause()
  for j = 1, nslots do load(j, guess(j)) end
  local t = settle()
  local q = p
  for _ = 1, tonumber(ARGV[q]) do
    local j, rem, used, reset = tonumber(ARGV[q + 1]), tonumber(ARGV[q + 2]), tonumber(ARGV[q + 3]), tonumber(ARGV[q + 4])
    q = q + 4
    advance(j, t, true)
    local have = st[j].total
    -- raised requests stop counting when the upstream frees them, if it said when
    local at = t
    if reset > 0 and reset < W[j] then at = t + reset - W[j] end
    if have < used then add(j, at, used - have) end
    st[j].set.rr = int(rem)
    st[j].set.ra = int(t)
  end
  if n > 0 then
    local until_ = t + n
    if until_ > paused_until() then
      local ms = int(math.ceil((until_ - now + S[1]) / 1000))
      redis.call('SET', KEYS[2 * nslots + 1], int(until_) .. ' ' .. int(off), 'PX', ms)
    end
  end
  save()
  return {t}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))

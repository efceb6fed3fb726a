-- Fixed-window state of one logical key, all rules at once, in one atomic step.
-- Mirrors fixedwindow.Counter: per counter, the count of one aligned window [k·W, (k+1)·W) of
-- Unix time and the latest instant seen (hw), which never goes backwards. The count belongs to
-- window k; once hw reaches (k+1)·W it is 0. Every instant and window is in whole µs (below
-- 2^53, so exact in a Lua number).
--
-- KEYS: per slot j, KEYS[j] a hash: "k" the window index the count belongs to, "c" the count,
--       "hw" the latest instant seen, "off" the key's clock offset (µs; absent: 0). Its TTL
--       runs to the end of hw's window plus slack.
-- ARGV: op ("record" | "reserve" | "admit" | "peek" | "release"), n, now override in µs (""
--       for Redis TIME), at (µs, for release), the step tolerance (strategy.StepTolerance, µs),
--       slot count, then per slot W and slack (µs),
--       then rule count, then per rule its slot (1-based) and effective limit.
-- Returns (durations as whole µs then extra ns, which is always 0 here):
--       record/release {now}; reserve {allowed, wait µs, wait ns, at};
--       peek {wait µs, wait ns, used...}; admit {allowed, wait µs, wait ns, at, then per rule
--       used, reset µs, reset ns}. Instants are the key's (TIME + offset).
--
-- Clock steps (strategy.Rebase, DESIGN §9). Every instant of a key (hw, window indexes, the at
-- of a release) is on the key's own timeline: Redis TIME (or the override) plus the key's clock
-- offset, the largest "off" its slots hold. When that instant is more than the step tolerance
-- behind the latest instant the slots have seen, the clock was stepped back: the offset is
-- raised so that the key's instant is that latest instant, and written to every slot the
-- operation writes (refusals and peeks included), so that the next operation finds it rather
-- than detecting the step again. The count stays in its window of that timeline, so a full
-- window stays full for the rest of it on the new clock. TTLs are durations, on Redis's clock.

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
-- the key's clock offset: the largest its slots hold, raised by load_all on a step back
local off = 0
-- the key's instant, raw + off; set by load_all, which every operation starts with
local now = raw
local nslots = tonumber(ARGV[6])
local W, S = {}, {}
local p = 7
for j = 1, nslots do
  W[j], S[j] = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  p = p + 2
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

-- floor(t / w), exact for integers below 2^53 (fmod is exact on doubles)
local function index(t, w)
  local r = math.fmod(t, w)
  if r < 0 then r = r + w end
  return (t - r) / w
end

local st = {}

local function load(j)
  local v = redis.call('HMGET', KEYS[j], 'k', 'c', 'hw', 'off')
  local hw = tonumber(v[3])
  st[j] = {k = tonumber(v[1]) or 0, c = tonumber(v[2]) or 0, hw = hw, off = tonumber(v[4]) or 0, existed = hw ~= nil}
end

-- Load every slot, set the key's instant (now) from the offset loaded, rebase the key when its
-- clock stepped back (see the top), and return the latest of now and every slot's time: the
-- instant operations that move the key's time are decided at.
local function load_all()
  for j = 1, nslots do
    load(j)
    if st[j].off > off then off = st[j].off end
  end
  local hw
  now, off, hw = key_instant(raw, off, st, nslots, STEP)
  if hw ~= nil and hw > now then return hw end
  return now
end

-- Move slot j's time to t if later; a window that has ended counts nothing.
local function advance(j, t)
  local s = st[j]
  if s.hw == nil or t > s.hw then s.hw = t end
  if s.c > 0 and s.hw >= (s.k + 1) * W[j] then s.c = 0 end
  return s.hw
end

-- count k attempts at t, in the window of the slot's time: an attempt dated in a window that
-- has ended there counts in the current one instead (never dropped, as fixedwindow.Counter.Add)
local function add(j, t, k)
  local s = st[j]
  local hw = advance(j, t)
  if s.c == 0 then s.k = index(hw, W[j]) end
  s.c = s.c + k
end

-- 0 when k more fit the slot's current window, else the time until it ends
local function wait(j, t, k, limit)
  local s = st[j]
  t = advance(j, t)
  if s.c + k <= limit then return 0 end
  return (s.k + 1) * W[j] - t
end

local function layered_wait(t, k)
  local d = 0
  for i = 1, nrules do
    d = math.max(d, wait(RS[i], t, k, RL[i]))
  end
  return d
end

-- write back the slots (all, or those that existed); TTL: the end of the window of the slot's
-- time, plus slack
local function save(existing)
  for j = 1, nslots do
    local s = st[j]
    if s.hw ~= nil and (s.existed or not existing) then
      -- off never falls below a slot's own (it is their largest), so 0 means none was stored
      if off > 0 then
        redis.call('HSET', KEYS[j], 'k', int(s.k), 'c', int(s.c), 'hw', int(s.hw), 'off', int(off))
      else
        redis.call('HSET', KEYS[j], 'k', int(s.k), 'c', int(s.c), 'hw', int(s.hw))
      end
      local x = (index(s.hw, W[j]) + 1) * W[j] + S[j]
      redis.call('PEXPIRE', KEYS[j], int(math.max(1, math.ceil((x - now) / 1000))))
    end
  end
end

if op == 'record' then
  load_all()
  for j = 1, nslots do add(j, now, n) end
  save(false)
  return {now}
end

if op == 'reserve' then
  local t = load_all()
  local d = layered_wait(t, n)
  if d > 0 then
    save(true)
    -- the wait is measured from the caller's instant (strategy.StepTolerance)
    return {0, d + t - now, 0, t}
  end
  for j = 1, nslots do add(j, t, n) end
  save(false)
  return {1, 0, 0, t}
end

if op == 'admit' then
  -- attempts count whether admitted or not
  local t = load_all()
  local d = layered_wait(t, n)
  local allowed = d == 0 and 1 or 0
  for j = 1, nslots do add(j, t, n) end
  -- a refused attempt counts too: the next one waits for every rule it filled
  if allowed == 0 then d = layered_wait(t, n) end
  local sk = t - now -- waits are measured from the caller's instant (strategy.StepTolerance)
  local out = {allowed, d > 0 and d + sk or 0, 0, t}
  for i = 1, nrules do
    local j = RS[i]
    advance(j, t)
    local used = st[j].c
    local r = used > 0 and wait(j, t, RL[i], RL[i]) or 0
    out[#out + 1] = used
    out[#out + 1] = r > 0 and r + sk or 0
    out[#out + 1] = 0
  end
  save(false)
  return out
end

if op == 'peek' then
  local out = {0, 0}
  local t = load_all()
  if n > 0 then
    out[1] = layered_wait(now, n)
    -- measured from the caller's instant (strategy.StepTolerance)
    if out[1] > 0 then out[1] = out[1] + t - now end
  end
  for i = 1, nrules do
    advance(RS[i], now)
    out[2 + i] = st[RS[i]].c
  end
  -- a slot with state keeps the time of the peek, as every operation does
  save(true)
  return out
end

if op == 'release' then
  local at = tonumber(ARGV[4])
  load_all()
  for j = 1, nslots do
    local s = st[j]
    if s.existed then
      advance(j, s.hw)
      if s.c > 0 and index(at, W[j]) == s.k then s.c = s.c - math.min(n, s.c) end
    end
  end
  save(true)
  return {now}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))

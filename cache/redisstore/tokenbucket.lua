-- Token-bucket state of one logical key, all rules at once, in one atomic step.
-- Mirrors tokenbucket.Bucket exactly. There the debt is (missing tokens) × W in token·ns, an
-- int64 up to 2^63 − 1: not exact in a Lua number (a double, exact below 2^53). Here it is
--
--     debt (token·ns) = 1000 · (q · W + r) + s,   0 ≤ r < W (µs),  0 ≤ s < 1000,
--
-- with q the whole missing tokens. Every instant is a whole µs and every W is whole µs, so
-- refills (elapsed ns × capacity) and spends (n × W ns) are multiples of 1000 token·ns: they
-- change q and r only. s is non-zero only after monitoring ran the debt into the bucket's cap
-- (tokenbucket's 2^63 − 1, not a multiple of 1000); it stays until the debt is paid off.
-- Bounds (checked by Validate): instants < 2^53 µs; W ≤ strategy.MaxWindow (< 2^49 µs);
-- capacity C ≤ 2^31; C·W < 2^53 (tokenbucket's C·W ≤ 2^62 ns); the cap's q < 2^53. So every
-- product below is below 2^53, and every division is an exact one (fmod first).
--
-- KEYS: per slot j, KEYS[j] a hash: "q", "r", "s" (the debt, as above), "hw" the latest
--       instant seen (the last refill, µs) and "off" the key's clock offset (µs; absent: 0).
--       Its TTL runs until the bucket is full, plus slack.
-- ARGV: op ("record" | "reserve" | "admit" | "peek" | "release"), n, now override in µs (""
--       for Redis TIME), at (unused), the step tolerance (strategy.StepTolerance, µs), slot
--       count, then per slot C, W (µs), the cap as q, r, s, and slack (µs), then rule count,
--       then per rule its slot (1-based) and effective limit.
-- Returns (durations as whole µs then extra ns, 0 to 999):
--       record/release {now}; reserve {allowed, wait µs, wait ns, at};
--       peek {wait µs, wait ns, used...}; admit {allowed, wait µs, wait ns, at, then per rule
--       used, reset µs, reset ns}. Instants are the key's (TIME + offset).
--
-- Clock steps (strategy.Rebase, DESIGN §9). Every instant of a key (hw) is on the key's own
-- timeline: Redis TIME (or the override) plus the key's clock offset, the largest "off" its
-- slots hold. When that instant is more than the step tolerance behind the latest instant the
-- slots have seen, the clock was stepped back: the offset is raised so that the key's instant
-- is that latest instant, and written to every slot the operation writes (refusals and peeks
-- included), so that the next operation finds it rather than detecting the step again. The
-- debt then refills on the new clock from where it was. TTLs are durations, on Redis's clock.

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
local C, W, QM, RM, SM, S = {}, {}, {}, {}, {}, {}
local p = 7
for j = 1, nslots do
  C[j], W[j] = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  QM[j], RM[j], SM[j] = tonumber(ARGV[p + 2]), tonumber(ARGV[p + 3]), tonumber(ARGV[p + 4])
  S[j] = tonumber(ARGV[p + 5])
  p = p + 6
end
local nrules = tonumber(ARGV[p])
p = p + 1
local RS, RL = {}, {}
for i = 1, nrules do
  RS[i], RL[i] = tonumber(ARGV[p]), tonumber(ARGV[p + 1])
  p = p + 2
end

local function int(x)
  return string.format('%d', x)
end

local st = {}

local function load(j)
  local v = redis.call('HMGET', KEYS[j], 'q', 'r', 's', 'hw', 'off')
  local hw = tonumber(v[4])
  st[j] = {q = tonumber(v[1]) or 0, r = tonumber(v[2]) or 0, s = tonumber(v[3]) or 0, hw = hw,
    off = tonumber(v[5]) or 0, existed = hw ~= nil}
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

-- Move slot j's time to t if later, paying off e·C token·µs of debt for the e µs elapsed
-- (all of it when e·C covers it).
local function refill(j, t)
  local s = st[j]
  if s.hw == nil then
    s.hw = t
    return t
  end
  if t <= s.hw then return s.hw end
  local e = t - s.hw
  s.hw = t
  if s.q == 0 and s.r == 0 and s.s == 0 then return t end
  local w, c = W[j], C[j]
  -- e·C = pq·W + pr, with e = e1·W + e0 and e0·C = a·W + pr (e0·C < C·W < 2^53)
  local e0 = math.fmod(e, w)
  local x = e0 * c
  local pr = math.fmod(x, w)
  -- e1·C may round once above 2^53, but then it exceeds q (< 2^53) all the same
  local pq = (e - e0) / w * c + (x - pr) / w
  if s.q < pq or s.q == pq and (s.r < pr or s.r == pr and s.s == 0) then
    s.q, s.r, s.s = 0, 0, 0
  else
    s.q, s.r = s.q - pq, s.r - pr
    if s.r < 0 then
      s.q, s.r = s.q - 1, s.r + w
    end
  end
  return t
end

-- spend k tokens at t (or the slot's time, if later), never past the cap
local function add(j, t, k)
  refill(j, t)
  local s = st[j]
  local room = QM[j] - s.q
  if k > room or k == room and (s.r > RM[j] or s.r == RM[j] and s.s > SM[j]) then
    s.q, s.r, s.s = QM[j], RM[j], SM[j]
  else
    s.q = s.q + k
  end
end

-- missing tokens rounded up (ceil(debt / W ns)), at most 2^31 − 1 as Bucket.Used
local function used(j, t)
  refill(j, t)
  local s = st[j]
  local u = s.q
  if s.r > 0 or s.s > 0 then u = u + 1 end
  return math.min(u, 2147483647)
end

-- smallest d ≥ 0 after which k tokens can be spent leaving capacity − limit:
-- ceil((debt − (limit − k)·W ns) / C) ns, returned as whole µs and extra ns (0 to 999)
local function wait(j, t, k, limit)
  refill(j, t)
  local s = st[j]
  local l = limit - k
  if s.q < l or s.q == l and s.r == 0 and s.s == 0 then return 0, 0 end
  local w, c = W[j], C[j]
  -- debt − allowed = 1000·(Q·W + r) + s with Q = q − l = q1·C + q0, so over C it is
  -- 1000·q1·W + (1000·Y + s)/C with Y = q0·W + r < C·W; Y = y1·C + y0
  local Q = s.q - l
  local q0 = math.fmod(Q, c)
  local y = q0 * w + s.r
  local y0 = math.fmod(y, c)
  local z = 1000 * y0 + s.s -- < 1000·C
  local z0 = math.fmod(z, c)
  local ns = (z - z0) / c
  if z0 > 0 then ns = ns + 1 end
  local us = (Q - q0) / c * w + (y - y0) / c
  if ns >= 1000 then
    us, ns = us + 1, ns - 1000
  end
  return us, ns
end

local function later(aus, ans, bus, bns)
  return aus > bus or aus == bus and ans > bns
end

local function layered_wait(t, k)
  local dus, dns = 0, 0
  for i = 1, nrules do
    local us, ns = wait(RS[i], t, k, RL[i])
    if later(us, ns, dus, dns) then dus, dns = us, ns end
  end
  return dus, dns
end

-- write back the slots (all, or those that existed); TTL: until the bucket is full, plus slack
local function save(existing)
  for j = 1, nslots do
    local s = st[j]
    if s.hw ~= nil and (s.existed or not existing) then
      -- off never falls below a slot's own (it is their largest), so 0 means none was stored
      if off > 0 then
        redis.call('HSET', KEYS[j], 'q', int(s.q), 'r', int(s.r), 's', int(s.s), 'hw', int(s.hw), 'off', int(off))
      else
        redis.call('HSET', KEYS[j], 'q', int(s.q), 'r', int(s.r), 's', int(s.s), 'hw', int(s.hw))
      end
      local us = wait(j, s.hw, 0, 0)
      local x = s.hw + us + 1 + S[j]
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
  local dus, dns = layered_wait(t, n)
  if dus > 0 or dns > 0 then
    save(true)
    -- the wait is measured from the caller's instant (strategy.StepTolerance)
    return {0, dus + t - now, dns, t}
  end
  for j = 1, nslots do add(j, t, n) end
  save(false)
  return {1, 0, 0, t}
end

if op == 'admit' then
  local t = load_all()
  local dus, dns = layered_wait(t, n)
  local ok = dus == 0 and dns == 0
  if ok then
    for j = 1, nslots do add(j, t, n) end
  end
  local sk = t - now -- waits are measured from the caller's instant (strategy.StepTolerance)
  if not ok then dus = dus + sk end
  local out = {ok and 1 or 0, dus, dns, t}
  for i = 1, nrules do
    local u = used(RS[i], t)
    local us, ns = 0, 0
    if u > 0 then us, ns = wait(RS[i], t, RL[i], RL[i]) end
    if us > 0 or ns > 0 then us = us + sk end
    out[#out + 1] = u
    out[#out + 1] = us
    out[#out + 1] = ns
  end
  save(not ok)
  return out
end

if op == 'peek' then
  local out = {0, 0}
  local t = load_all()
  if n > 0 then
    out[1], out[2] = layered_wait(now, n)
    -- measured from the caller's instant (strategy.StepTolerance)
    if out[1] > 0 or out[2] > 0 then out[1] = out[1] + t - now end
  end
  for i = 1, nrules do
    out[2 + i] = used(RS[i], now)
  end
  -- a slot with state keeps the time of the peek, as every operation does
  save(true)
  return out
end

if op == 'release' then
  load_all()
  for j = 1, nslots do
    local s = st[j]
    if s.existed then
      -- Bucket.Remove: all of it when n ≥ ceil(debt / W ns), uncapped
      local u = s.q
      if s.r > 0 or s.s > 0 then u = u + 1 end
      if n >= u then
        s.q, s.r, s.s = 0, 0, 0
      else
        s.q = s.q - n
      end
    end
  end
  save(true)
  return {now}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))

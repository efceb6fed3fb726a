-- Token-bucket state of one logical key, all rules at once, in one atomic step, in one Redis
-- string (state.lua, magic "tb"). Mirrors tokenbucket.Bucket exactly. There the debt is
-- (missing tokens) × W in token·ns, an int64 up to 2^63 − 1: not exact in a Lua number (a
-- double, exact below 2^53). Here it is
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
-- Plan (state.lua's K doubles): slack (µs), per slot C, W (µs) and the cap as q, r, s, then per
-- rule its slot (1-based) and effective limit.
-- Slot record (F = 4): hw (the latest instant seen, the last refill, µs), q, r, s (the debt, as
-- above). The key's TTL runs until its slots are full, plus slack; it is set when that moves
-- past it or more than slack before it (a release that fills a bucket).
-- Returns {corrupt, ...} (state.lua's code, then durations as whole µs then extra ns, 0 to
-- 999): record/release {}; reserve {allowed, wait µs, wait ns, at}; peek {wait µs, wait ns,
-- used...}; admit {allowed, wait µs, wait ns, at, then per rule used, reset µs, reset ns}.
-- Instants are the key's (TIME + offset).
-- Calls: TIME (unless the clock is overridden), GET, SET (KEEPTTL, or PX when the key's
-- expiry moves).
--
-- Clock steps (engine.Rebase, DESIGN §9). Every instant of a key (hw) is on the key's own
-- timeline: Redis TIME (or the override) plus the key's clock offset. When that instant is more
-- than the step tolerance behind the latest instant the slots have seen, the clock was stepped
-- back: the offset is raised so that the key's instant is that latest instant, and written
-- with the key (refusals and peeks included). The debt then refills on the new clock from where
-- it was. TTLs are durations, on Redis's clock.

local h, P, pre = arguments()
local op, n, STEP, NS, NR = h[1], h[2], h[5], h[6], h[7]
local raw = clock(h[3])
local S = P[1]
local C, W, QM, RM, SM = {}, {}, {}, {}, {}
for j = 1, NS do
  local b = 5 * j - 3
  C[j], W[j], QM[j], RM[j], SM[j] = P[b], P[b + 1], P[b + 2], P[b + 3], P[b + 4]
end
local q0 = 1 + 5 * NS
local RS, RL = {}, {}
for i = 1, NR do
  RS[i], RL[i] = P[q0 + 1], P[q0 + 2]
  q0 = q0 + 2
end

local F = 4
local L = load_key(pre, F)
-- sound figures (state.lua's sound_head): hw an instant, q and r counts, 0 ≤ s < 1000; for the
-- strategy's slots, a debt past the slot's cap (what refills in strategy.MaxWindow) or an r of
-- W or more is unsound too: add never spends past the cap, and refill keeps 0 ≤ r < W
local stored, st, m, own = load_slots(L, pre, NS, F, raw, S, STEP, function(H, b, top)
  local hw, q, r, s = H[b], H[b + 1], H[b + 2], H[b + 3]
  if hw % 1 == 0 and hw >= -LIM and hw <= top and count(q) and count(r) and count(s) and s < 1000 then
    return {hw = hw, q = q, r = r, s = s, existed = true}
  end
end, function() return {q = 0, r = 0, s = 0} end, function(j, s)
  return s.q <= QM[j] and s.r < W[j]
end)
local off = L.off
local now = raw
local bad = L.bad

-- Set the key's instant (now) from the offset, rebase the key when its clock stepped back (see
-- the top), and return the latest of now and every slot's time: the instant operations that
-- move the key's time are decided at.
local function settle()
  local hw
  now, off, hw = key_instant(raw, off, st, NS, STEP)
  if hw ~= nil and hw > now then return hw end
  return now
end

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
  for i = 1, NR do
    local us, ns = wait(RS[i], t, k, RL[i])
    if later(us, ns, dus, dns) then dus, dns = us, ns end
  end
  return dus, dns
end

-- Write the key back: the slots stored (the strategy's updated, others' as they were), then
-- the strategy's new ones (with all set, every one that has a time; else those stored).
local function save(all)
  local nums, ids = {off, 0, 0}, {}
  local need
  local same = L.ids == nil
  local function emit(s, id, j)
    local k = #nums
    nums[k + 1], nums[k + 2], nums[k + 3], nums[k + 4] = s.hw, s.q, s.r, s.s
    ids[#ids + 1] = id
    if j then
      local e = s.hw + wait(j, s.hw, 0, 0) + 1
      if need == nil or e > need then need = e end
    end
  end
  local function wanted(s)
    return s.hw ~= nil and (all or s.existed)
  end
  local foreign = false
  if same then
    for j = 1, NS do
      if wanted(st[j]) then emit(st[j], j, j) else same = false end
    end
    if not same then
      own = own_ids(pre)
      for i = 1, #ids do ids[i] = own[ids[i]] end
    end
  else
    local mine = {}
    for j = 1, NS do
      if m[j] then mine[m[j]] = j end
    end
    for i = 1, L.n do
      local j = mine[i]
      if j then
        emit(st[j], L.ids[i], j)
      else
        emit(stored[i], L.ids[i], nil)
        foreign = true
        if L.x and (need == nil or L.x - S > need) then need = L.x - S end
      end
    end
    for j = 1, NS do
      if not m[j] and wanted(st[j]) then emit(st[j], own[j], j) end
    end
  end
  if need == nil then return write_key(L, nil) end
  local x, ttl = expiry(L, need, S, now, not foreign)
  nums[2] = x
  write_key(L, encode(pre, same, ids, nums, ''), ttl)
end

if op == 1 then -- record
  settle()
  for j = 1, NS do add(j, now, n) end
  save(true)
  return {bad}
end

if op == 2 then -- reserve
  local t = settle()
  local dus, dns = layered_wait(t, n)
  if dus > 0 or dns > 0 then
    save(false)
    -- the wait is measured from the caller's instant (engine.StepTolerance)
    return {bad, 0, dus + t - now, dns, t}
  end
  for j = 1, NS do add(j, t, n) end
  save(true)
  return {bad, 1, 0, 0, t}
end

if op == 3 then -- admit
  local t = settle()
  local dus, dns = layered_wait(t, n)
  local ok = dus == 0 and dns == 0
  if ok then
    for j = 1, NS do add(j, t, n) end
  end
  local sk = t - now -- waits are measured from the caller's instant (engine.StepTolerance)
  if not ok then dus = dus + sk end
  local out = {bad, ok and 1 or 0, dus, dns, t}
  for i = 1, NR do
    local u = used(RS[i], t)
    local us, ns = 0, 0
    if u > 0 then us, ns = wait(RS[i], t, RL[i], RL[i]) end
    if us > 0 or ns > 0 then us = us + sk end
    out[#out + 1] = u
    out[#out + 1] = us
    out[#out + 1] = ns
  end
  save(ok)
  return out
end

if op == 4 then -- peek
  local out = {bad, 0, 0}
  local t = settle()
  if n > 0 then
    out[2], out[3] = layered_wait(now, n)
    -- measured from the caller's instant (engine.StepTolerance)
    if out[2] > 0 or out[3] > 0 then out[2] = out[2] + t - now end
  end
  for i = 1, NR do
    out[3 + i] = used(RS[i], now)
  end
  -- a slot with state keeps the time of the peek, as every operation does
  save(false)
  return out
end

if op == 5 then -- release
  settle()
  for j = 1, NS do
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
  save(false)
  return {bad}
end

return redis.error_reply('ratemonitor: unknown operation ' .. tostring(op))

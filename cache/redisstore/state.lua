-- Put before the fixed-window and token-bucket scripts (the rolling window's keeps its own copy
-- of this layout, inlined, to make fewer closures per call): the operation's arguments,
-- the one Redis key that holds a logical key's whole state under a strategy, and the key's
-- clock offset. Lua numbers are doubles; every figure here is an integer below 2^53, so exact.
--
-- ARGV[1] is the only argument, a string of little-endian doubles (struct "<d") then bytes:
--   op (1 record, 2 reserve, 3 admit, 4 peek, 5 release, 6 sync), n, the clock override in µs
--   (-1: Redis TIME), at (µs, for release), the step tolerance (engine.StepTolerance, µs),
--   slot count NS, rule count NR, K; then K doubles: the strategy's plan (each script says
--   which) and, for sync, the reports; then the value prefix of the strategy (below).
-- One struct.unpack reads them all: each tonumber(ARGV[i]) costs the server about as much.
--
-- KEYS[1] is a string:
--   magic (2 bytes: "rw", "fw" or "tb"), version ("1"), the slot IDs' length (struct "<H") and
--   the slot IDs (engine.Strategy.CounterID, joined by ","): together the value prefix, equal
--   to the strategy's own prefix when the key holds exactly its slots in its order;
--   then doubles: the key's clock offset (off, µs, ≥ 0), the instant its TTL was set to end
--   (x, on the key's timeline), the end of its pause (pu, µs, 0 when none; rolling window
--   only), then F per slot (the script says which; the first is the slot's time hw), then
--   the script's variable part (the rolling window's buckets).
-- Slots of other strategies on the same logical key (rules of another Transport over the same
-- store) are kept as they are, so that rules of the same counter share one count.

local rep, sub = string.rep, string.sub
local unpackd, packd = struct.unpack, struct.pack

local function int(x)
  return string.format('%d', x)
end

-- the operation's arguments: h = {op, n, clock, at, step, NS, NR, K}, P the plan, pre the prefix
local function arguments()
  local a = ARGV[1]
  local h = {unpackd('<dddddddd', a)}
  local P = {unpackd('<' .. rep('d', h[8]), a, h[9])}
  return h, P, sub(a, P[h[8] + 1])
end

-- the store's clock, µs: the override, or Redis TIME
local function clock(c)
  if c >= 0 then return c end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- What a key was found to hold when it could not be used; the reply's first figure, so that
-- the Go side reports it (observe.StateLost). 0: usable or absent.
local WRONGTYPE, FOREIGN, VERSION, UNREADABLE = 1, 2, 3, 4

-- Read the key: returns a state L with L.bad (0 or one of the codes above), L.v (the value, or
-- false when absent or unusable), L.off, L.x, L.pu, L.n (slots stored), L.ids (their IDs,
-- nil when they are exactly the strategy's own), L.H (the doubles: off, x, pu, then F per slot)
-- and L.pos (where the variable part starts). A value that cannot be read is started afresh.
local function load_key(pre, F)
  local L = {bad = 0, v = false, off = 0, pu = 0, n = 0}
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then
    L.bad = WRONGTYPE
    return L
  end
  if not v then return L end
  local hp, n, ids = #pre, 0, nil
  if sub(v, 1, hp) ~= pre then
    if sub(v, 1, 2) ~= sub(pre, 1, 2) then
      L.bad = FOREIGN
      return L
    end
    if sub(v, 3, 3) ~= sub(pre, 3, 3) then
      L.bad = VERSION
      return L
    end
    if #v < 5 then
      L.bad = UNREADABLE
      return L
    end
    local sl = unpackd('<H', v, 4)
    hp = 5 + sl
    if #v < hp then
      L.bad = UNREADABLE
      return L
    end
    ids = {}
    if sl > 0 then
      for id in string.gmatch(sub(v, 6, hp), '[^,]+') do ids[#ids + 1] = id end
    end
    n = #ids
  else
    n = -1 -- the strategy's own: the caller knows how many
  end
  L.ids, L.hp = ids, hp
  L.n = n
  L.v = v
  return L
end

-- Read the doubles of L's value for n slots of F each; false when the value is too short.
local function load_numbers(L, n, F)
  local c = 3 + F * n
  if #L.v < L.hp + 8 * c then return false end
  local H = {unpackd('<' .. rep('d', c), L.v, L.hp + 1)}
  L.H, L.n, L.pos = H, n, H[c + 1]
  L.off, L.x, L.pu = H[1], H[2], H[3]
  return true
end

-- Sound figures (issue 14): load_numbers checks the prefix and the length only, so a value of
-- the right shape may still hold doubles no script writes (NaN compares false, so a NaN count
-- never fills; a pause or window far ahead locks the key out). Every figure a script writes is
-- an integer below 2^53 (x % 1 is NaN for NaN and ±inf, so x % 1 == 0 rejects those too), and
-- no instant lies further ahead of the key's instant than a window (strategy.MaxWindow, µs,
-- checked equal by TestScriptsBoundInstantsByMaxWindow), the slack and the step tolerance: anything else is
-- unreadable. An instant may be negative (a clock near 1970), down to −2^53.
local LIM = 9007199254740992
local MAXW = 315360000000000

-- The latest instant L's value may hold (µs, on the key's timeline), or false when its off, x
-- or pu is unsound; raw is the store's clock, S the slack, step the step tolerance.
local function sound_head(L, raw, S, step)
  local off, x, pu = L.off, L.x, L.pu
  if off % 1 ~= 0 or off < 0 or raw + off >= LIM then return false end
  local top = raw + off + MAXW + S + step + 1
  if x % 1 ~= 0 or x < -LIM or x > top or pu % 1 ~= 0 or pu < 0 or pu > top then return false end
  return top
end

-- whether y is a sound count: an integer from 0 to 2^53
local function count(y)
  return y % 1 == 0 and y >= 0 and y <= LIM
end

-- Mark L unreadable: started afresh.
local function unreadable(L)
  L.bad, L.v, L.ids, L.H, L.n, L.off, L.x, L.pu = UNREADABLE, false, nil, nil, 0, 0, nil, 0
end

-- the strategy's slot IDs, from its prefix
local function own_ids(pre)
  local ids = {}
  for id in string.gmatch(sub(pre, 6), '[^,]+') do ids[#ids + 1] = id end
  return ids
end

-- Where each of the strategy's NS slots is in L (index into the stored slots, nil when absent).
local function slot_map(L, pre, NS)
  local m = {}
  if L.ids == nil then
    for j = 1, L.n do m[j] = j end
    return m
  end
  local own = own_ids(pre)
  for i = 1, #L.ids do
    for j = 1, NS do
      if own[j] == L.ids[i] then m[j] = i end
    end
  end
  return m, own
end

-- The strategy's NS slots as L holds them (the fixed window's and the token bucket's load):
-- every stored slot of F numbers decoded by decode(H, b, top) (b: the index of its first
-- number in L.H, top: sound_head's bound; a table, or nil when a figure is unsound), then each
-- of the strategy's slots (fresh() where L has none) checked against its plan by fits(j, s).
-- One unsound figure makes L unreadable and every slot fresh: no key is locked out. Returns
-- the stored slots, the strategy's slots, slot_map's map and own.
local function load_slots(L, pre, NS, F, raw, S, step, decode, fresh, fits)
  local stored = {}
  if L.v then
    local ns = L.n
    if ns < 0 then ns = NS end
    local top = load_numbers(L, ns, F) and L.pos == #L.v + 1 and sound_head(L, raw, S, step)
    if top then
      for i = 1, ns do
        stored[i] = decode(L.H, 4 + F * (i - 1), top)
        if not stored[i] then
          top = false
          break
        end
      end
    end
    if not top then
      unreadable(L)
      stored = {}
    end
  end
  local m, own = slot_map(L, pre, NS)
  local st = {}
  for j = 1, NS do
    st[j] = m[j] and stored[m[j]] or fresh()
  end
  for j = 1, NS do
    if not fits(j, st[j]) then
      unreadable(L)
      stored = {}
      m, own = slot_map(L, pre, NS)
      for i = 1, NS do st[i] = fresh() end
      break
    end
  end
  return stored, st, m, own
end

-- The value for the slots ids (in order), nums (off, x, pu, then F per slot) and the variable
-- part tail; pre when ids are exactly the strategy's own.
local function encode(pre, own, ids, nums, tail)
  local head = pre
  if own == false then
    local sig = table.concat(ids, ',')
    head = sub(pre, 1, 3) .. packd('<H', #sig) .. sig
  end
  return head .. packd('<' .. rep('d', #nums), unpack(nums)) .. tail
end

-- The expiry x to store (on the key's timeline) and the TTL to set (ms), or nil to keep the
-- key's: a TTL is set only for a fresh key (absent or unusable), when the expiry stored falls
-- short of need, or, with shrink, when it lies more than slack past it.
local function expiry(L, need, slack, now, shrink)
  local x = L.x
  if L.v and x ~= nil and x >= need and not (shrink and x > need + slack) then return x, nil end
  x = need + slack
  return x, int(math.max(1, math.ceil((x - now) / 1000)))
end

-- A key's instant is the store's clock (raw, µs) plus its clock offset (off). When that is more
-- than step (engine.StepTolerance, µs) behind the latest instant any of the strategy's slots
-- has seen (st[j].hw, nil when none), the clock stepped back: the offset is raised so that the
-- key's instant is that latest instant, and written with the key. Returns the key's instant,
-- the offset and that latest instant (nil when none).
local function key_instant(raw, off, st, nslots, step)
  local now = raw + off
  local hw
  for j = 1, nslots do
    local h = st[j].hw
    if h ~= nil and (hw == nil or h > hw) then hw = h end
  end
  if hw ~= nil and hw - now > step then
    off = off + (hw - now)
    now = hw
  end
  return now, off, hw
end

-- Write value with the TTL ttl (ms; nil: KEEPTTL) unless it is the value read and keeps its TTL.
-- With nothing to write (value nil), a key found unusable is deleted, so that it is reported
-- once.
local function write_key(L, value, ttl)
  if value == nil then
    if L.bad ~= 0 then redis.call('DEL', KEYS[1]) end
  elseif ttl then
    redis.call('SET', KEYS[1], value, 'PX', ttl)
  elseif value ~= L.v then
    redis.call('SET', KEYS[1], value, 'KEEPTTL')
  end
end

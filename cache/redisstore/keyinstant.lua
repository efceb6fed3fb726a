-- Shared by the three scripts (redisstore.go puts it before each): the key's instant and its
-- clock offset. A key's instant is the store's clock (raw, µs) plus the largest offset its slots
-- hold (off). When that is more than step (strategy.StepTolerance, µs) behind the latest instant
-- any slot has seen (st[j].hw, nil when none), the clock stepped back: the offset is raised so
-- that the key's instant is that latest instant, and the caller writes it to every slot it
-- touches. Returns the key's instant, the offset and that latest instant (nil when none).
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


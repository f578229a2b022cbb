-- A host confirms it applied the shares of its report `seq`: the larger
-- shares it gave up stop counting against the quotas, and the hosts short
-- of their fair share of those tenants (w) are nudged to ask again at once.
-- KEYS: each tenant's lease hash. ARGV: host, seq, nudge (the prefix of
-- each host's nudge channel).
local host, seq, nudge = ARGV[1], ARGV[2], ARGV[3]
local nudged = {}
for _, key in ipairs(KEYS) do
  local records = redis.call('HGETALL', key)
  local freed, short = false, {}
  for j = 1, #records, 2 do
    local h, ok, r = records[j], pcall(cjson.decode, records[j + 1])
    -- A record that is not the report's (report.lua drops those) counts for nothing.
    if not ok or type(r) ~= 'table' then
      -- Skipped.
    elseif h == host then
      if r.q == seq and r.ps then
        r.ps, r.pe = nil, nil
        redis.call('HSET', key, host, cjson.encode(r))
        freed = true
      end
    elseif r.w then
      short[#short + 1] = h
    end
  end
  if freed then
    for _, h in ipairs(short) do nudged[h] = true end
  end
end
for h in pairs(nudged) do redis.call('PUBLISH', nudge .. h, host) end
return 0

-- A host confirms it applied the shares of its report `seq`: the larger
-- shares it gave up stop counting against the quotas.
-- KEYS: each tenant's lease hash. ARGV: host, seq.
local host, seq = ARGV[1], ARGV[2]
for _, key in ipairs(KEYS) do
  local raw = redis.call('HGET', key, host)
  if raw then
    local r = cjson.decode(raw)
    if r.q == seq and r.ps then
      r.ps, r.pe = nil, nil
      redis.call('HSET', key, host, cjson.encode(r))
    end
  end
end
return 0

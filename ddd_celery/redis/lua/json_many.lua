-- Read one value of many keys in one call, answered as one JSON array: what `jobs list` and
-- beat's set-up read of every job.
--
-- Every value these keys hold is a JSON text (an epoch in ms, a run's record as JSON), so the
-- array is the values joined as they are: the caller decodes one reply per call, not one per key.
--
-- Keys
--   KEYS[1..n]  the keys (a checkpoint `<prefix><job>`) or, with ARGV[1], the hashes (a run
--               state or a last run `<prefix><job>`).
-- Arguments
--   ARGV[1]  optional: the field of each hash to read (`running`, `run`); without it, each
--            key's string value (GET).
-- Returns
--   `[v1,...,vn]`, in the order of KEYS, `null` where the key or its field does not exist.
local values = {}
local field = ARGV[1]
for i = 1, #KEYS do
  local value
  if field then
    value = redis.call('HGET', KEYS[i], field)
  else
    value = redis.call('GET', KEYS[i])
  end
  values[i] = value or 'null'
end
return '[' .. table.concat(values, ',') .. ']'

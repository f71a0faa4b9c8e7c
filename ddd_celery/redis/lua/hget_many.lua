-- Read one field of many hashes in one call: what `jobs list` reads of every job.
--
-- Keys
--   KEYS[1..n]  the hashes (a run state `<prefix><job>` or a last run `<prefix><job>`).
-- Arguments
--   ARGV[1]  the field to read (`running`, `run`).
-- Returns
--   n values, in the order of KEYS, each nil where the hash or its field does not exist.
local values = {}
for i = 1, #KEYS do
  values[i] = redis.call('HGET', KEYS[i], ARGV[1])
end
return values

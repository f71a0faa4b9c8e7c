-- Keep the records of a batch, in their order, as last_run_write.lua would one call each: what
-- beat records of the occurrences of a dispatch batch it did not send, in one round trip
-- (last_run_write in occurrence_lib.lua, prepended to this script).
--
-- The batch comes as one JSON argument and each key is built here from its prefix, as
-- json_many.lua builds its keys: a thousand records are a handful of arguments, not three each.
--
-- Keys
--   KEYS[1]  the last runs' prefix, never read: it routes the call to the prefixes' slot on a
--            Redis Cluster (where both prefixes carry one hash tag, ddd_celery/redis/slots.py)
--   and, built here, the last run `<ARGV[1]><job>` and the run history `<ARGV[2]><job>` of
--   each record (see occurrence_lib.lua).
-- Arguments
--   ARGV[1]  the prefix of the last runs.
--   ARGV[2]  the prefix of the run histories.
--   ARGV[3]  how many records each run history keeps (positive).
--   ARGV[4]  the records, a JSON array of `[job, occurrence in epoch ms as a string, record
--            as JSON text]`.
-- Returns
--   how many records were kept as their job's last run (the others were of an earlier
--   occurrence than the one recorded); every record goes to its job's history.
local prefix, history_prefix, limit = ARGV[1], ARGV[2], ARGV[3]
local records = cjson.decode(ARGV[4])
local kept = 0
for i = 1, #records do
  local job, at, record = records[i][1], records[i][2], records[i][3]
  kept = kept + last_run_write(prefix .. job, at, record, history_prefix .. job, limit)
end
return kept

-- End a run on the worker: keep its last run and its history (last_run_write), then end the run
-- in progress and promote the occurrence queued behind it (run_finish), both in
-- occurrence_lib.lua, prepended to this script. One round trip.
--
-- Keys
--   KEYS[1]  the run state, `<prefix><job>` (see occurrence_lib.lua).
--   KEYS[2]  the last run, `<prefix><job>` (see occurrence_lib.lua); any key name when no
--            record is kept (never read).
--   KEYS[3]  the run history, `<history prefix><job>` (see occurrence_lib.lua); any key name
--            when no record is kept (never read).
-- Arguments
--   ARGV[1]  the occurrence whose run ends, in epoch milliseconds.
--   ARGV[2]  the time to live of the promoted run, in milliseconds (positive).
--   ARGV[3]  '1' to keep the record ARGV[4].
--   ARGV[4]  the record of the run, JSON.
--   ARGV[5]  how many records the run history keeps (positive when a record is kept).
-- Returns
--   the promoted occurrence in epoch milliseconds, or nil, as run_finish.lua (sent again, it
--   answers the same).
if ARGV[3] == '1' then
  last_run_write(KEYS[2], ARGV[1], ARGV[4], KEYS[3], ARGV[5])
end
return run_finish(KEYS[1], ARGV[1], ARGV[2])

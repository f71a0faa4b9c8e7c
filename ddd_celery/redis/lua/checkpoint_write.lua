-- Record a job's checkpoint unless a later one is recorded: a checkpoint only moves forward
-- (checkpoint_write in occurrence_lib.lua, prepended to this script).
--
-- Keys
--   KEYS[1]  the checkpoint, `<prefix><job>` (see occurrence_lib.lua).
-- Arguments
--   ARGV[1]  the occurrence handled, in epoch milliseconds.
-- Returns
--   1 when written; 0 when the recorded instant is the same or later (unchanged).
return checkpoint_write(KEYS[1], ARGV[1])

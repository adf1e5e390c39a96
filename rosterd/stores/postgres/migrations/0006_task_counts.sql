-- Schema 6: the task gauge counts tasks by status every few seconds from
-- this index alone (an index-only scan), never reading the records of the
-- whole history.
CREATE INDEX tasks_by_status ON tasks (status);

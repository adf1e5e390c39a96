-- Schema 5: a start puts each task where the gates against its runs say
-- reading only what a gate may still move (the paused tasks, the gates
-- against given runs), however many tasks and gates there ever were.
CREATE INDEX gates_by_run ON gates (run) WHERE run IS NOT NULL;
CREATE INDEX tasks_paused ON tasks (n) WHERE status = 'paused';

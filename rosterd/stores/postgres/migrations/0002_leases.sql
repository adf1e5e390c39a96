-- Schema 2: what several hosts need to share one database.

-- Who holds a session's turns (or a pair being opened, or a task or direct
-- run under way) until when: seconds since the epoch, by the hosts' clocks.
CREATE TABLE leases (
    key       text PRIMARY KEY,
    holder    text NOT NULL,
    until     double precision NOT NULL
);

-- Every write to a run counts here: a host whose copy of a session is older
-- than this reads it again before the next turn.
ALTER TABLE runs ADD COLUMN revision bigint NOT NULL DEFAULT 0;

-- The host running a task, until when; claims skip tasks a live host holds.
ALTER TABLE tasks ADD COLUMN holder text, ADD COLUMN lease_until double precision;

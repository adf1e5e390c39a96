-- rosterd state, schema 1. Every record is kept as the exact JSON text the
-- file backend would write (msgspec's encoding, never jsonb, which reorders
-- and respaces), beside the columns that queries select and order by.

CREATE TABLE channels (
    channel   text PRIMARY KEY,
    last_seq  bigint NOT NULL              -- posts take seqs by updating this row
);

CREATE TABLE channel_messages (
    channel   text NOT NULL,
    seq       bigint NOT NULL,
    run       text,
    record    text NOT NULL,               -- ChannelMessage
    PRIMARY KEY (channel, seq)
);

CREATE TABLE memory_workers (
    worker    text PRIMARY KEY,
    last_note bigint NOT NULL              -- notes take m-<n> by updating this row
);

CREATE TABLE memory_notes (
    worker    text NOT NULL,
    n         bigint NOT NULL,
    record    text NOT NULL,               -- MemoryItem
    PRIMARY KEY (worker, n)
);

-- Every write to gates and tasks takes the next change number: a host
-- catches up on what others did by reading changes after the last it saw.
CREATE SEQUENCE state_changes;

CREATE TABLE gates (
    n         bigint PRIMARY KEY,          -- g-<n>
    worker    text NOT NULL,
    run       text,
    status    text NOT NULL,
    filed_at  double precision NOT NULL,
    change    bigint NOT NULL,
    record    text NOT NULL                -- GateState
);
CREATE SEQUENCE gate_numbers;
CREATE INDEX gates_by_change ON gates (change);
CREATE INDEX gates_open_by_run ON gates (run) WHERE status = 'open';
CREATE INDEX gates_by_worker ON gates (worker, filed_at, n);

CREATE TABLE tasks (
    n            bigint PRIMARY KEY,       -- task-<n>
    status       text NOT NULL,
    submitted_at double precision NOT NULL,
    change       bigint NOT NULL,
    record       text NOT NULL             -- TaskState
);
CREATE SEQUENCE task_numbers;
CREATE INDEX tasks_pending ON tasks (submitted_at, n) WHERE status IN ('queued', 'running');

CREATE TABLE task_runs (
    run       text PRIMARY KEY,
    task      bigint NOT NULL REFERENCES tasks (n)
);

CREATE TABLE runs (
    id         text PRIMARY KEY,
    created_at double precision NOT NULL,
    status     text NOT NULL,
    surface    text NOT NULL,
    record     text NOT NULL               -- RunInfo
);
CREATE INDEX runs_by_creation ON runs (created_at, id);
CREATE INDEX runs_open ON runs (id) WHERE status = 'open';

CREATE TABLE run_context (
    run       text NOT NULL REFERENCES runs (id),
    n         integer NOT NULL,            -- line number in context.jsonl
    turn      integer NOT NULL,
    record    text NOT NULL,               -- ContextRecord
    PRIMARY KEY (run, n)
);

CREATE TABLE run_transcript (
    run       text NOT NULL REFERENCES runs (id),
    n         integer NOT NULL,            -- line number in transcript.jsonl
    record    text NOT NULL,               -- TranscriptEntry
    PRIMARY KEY (run, n)
);

CREATE TABLE session_states (
    run       text PRIMARY KEY REFERENCES runs (id),
    record    text NOT NULL                -- SessionState (system.json)
);

CREATE TABLE session_pointers (
    worker    text NOT NULL,
    channel   text NOT NULL,
    session   text NOT NULL,
    PRIMARY KEY (worker, channel)
);

CREATE TABLE prefixes (
    worker    text NOT NULL,
    channel   text NOT NULL,               -- '' for direct runs
    record    text NOT NULL,               -- PrefixState
    PRIMARY KEY (worker, channel)
);

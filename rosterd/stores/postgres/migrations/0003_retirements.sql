-- Schema 3: notes retired by a worker's forget or an operator. A retirement
-- is appended, never a note rewritten; retirements take their number per
-- worker as notes do, so a host catches up on what is new.
ALTER TABLE memory_workers ADD COLUMN last_retired bigint NOT NULL DEFAULT 0;

CREATE TABLE memory_retirements (
    worker    text NOT NULL,
    n         bigint NOT NULL,
    record    text NOT NULL,               -- Retirement
    PRIMARY KEY (worker, n)
);

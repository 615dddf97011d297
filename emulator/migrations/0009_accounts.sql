-- Accounts created on this emulator (issue #28). Each is a cloud of its own, in a database file of its own beside
-- this one; this table, in the emulator's own database, says which accounts there are and their tokens (kept as
-- the credentials file keeps the emulator's own: the database is readable by its owner only).
CREATE TABLE accounts (
    id          TEXT PRIMARY KEY NOT NULL,
    user_token  TEXT NOT NULL UNIQUE,
    admin_token TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);

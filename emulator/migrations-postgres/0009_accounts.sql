-- ../migrations/0009_accounts.sql on PostgreSQL.
CREATE TABLE accounts (
    id          TEXT PRIMARY KEY NOT NULL,
    user_token  TEXT NOT NULL UNIQUE,
    admin_token TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);

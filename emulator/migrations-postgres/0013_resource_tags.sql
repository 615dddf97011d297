-- ../migrations/0013_resource_tags.sql on PostgreSQL.
CREATE TABLE resource_tags (
    resource_id  TEXT NOT NULL,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    PRIMARY KEY (resource_id, key)
);

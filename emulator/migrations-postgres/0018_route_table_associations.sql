-- A zone's subnet explicitly associated with a route table (EC2's AssociateRouteTable): a zone with no row uses
-- the main table. A table with an association cannot be deleted; a zone has one association at most.
CREATE TABLE route_table_associations (
    id              TEXT PRIMARY KEY NOT NULL,
    route_table_id  TEXT NOT NULL REFERENCES route_tables(id),
    zone            TEXT NOT NULL UNIQUE,
    created_at      BIGINT NOT NULL
);
CREATE INDEX route_table_associations_table ON route_table_associations(route_table_id);

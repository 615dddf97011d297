-- Tags of the resources that have no tags column of their own (issue #49: EC2's CreateTags on route tables, the
-- VPC and its subnets; an instance's tags stay in `instances.tags`). `resource_id` is the resource's ID as the
-- store knows it: a route table's own ID, the VPC's and subnets' IDs as the AWS face derives them.
CREATE TABLE resource_tags (
    resource_id  TEXT NOT NULL,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    PRIMARY KEY (resource_id, key)
);

-- Hung machines: the instance runs, its guest (and so its kubelet) does not answer. A hang ends when the machine
-- restarts: it counts only while the instance has been running since before `since`.
CREATE TABLE hangs (
    instance_id TEXT PRIMARY KEY NOT NULL,
    since INTEGER NOT NULL
);

//! The end-to-end suite, in one binary: the conformance cases (`conformance_*`, judged only through the
//! Kubernetes API and the cloud, against either CCM and any backend) and the tests of the `fakecloud-ccm`
//! binary itself (`ccm_*`, on the local backend); and cases of several clusters on one cloud (`shared_cloud`, on
//! the local backend, with either CCM).

mod ccm_at_scale;
mod ccm_leader;
mod ccm_serving;
mod ccm_startup;
mod conformance_bug_aws_1328;
mod conformance_bug_k8s_100779;
mod conformance_bug_k8s_109180;
mod conformance_bug_k8s_29298;
mod conformance_bug_k8s_31858;
mod conformance_bug_k8s_68684;
mod conformance_bug_k8s_69362;
mod conformance_bug_k8s_94966;
mod conformance_bug_os_2066;
mod conformance_bug_os_3114;
mod conformance_crashes;
mod conformance_faults;
mod conformance_flaky_cloud;
mod conformance_lb_traffic;
mod conformance_network;
mod conformance_node_races;
mod conformance_nodes;
mod conformance_presets;
mod conformance_routes;
mod conformance_services;
mod shared_cloud;

//! What client-go and the controller-manager framework give upstream's controllers, apart from the controllers
//! themselves: the event recorder ([`events`]), the shared Node informer ([`informer`]), the API client with
//! client-go's QPS and burst ([`kube_client`]), leader election on a Lease ([`leader`]), the work queues' rate
//! limiters ([`ratelimit`]), the HTTPS `/healthz` and `/metrics` endpoints ([`serve`]) and the metrics they
//! expose ([`metrics`]). The controllers' unit tests talk to `fake_api`, an API server in memory, as upstream's tests
//! use client-go's fake clientset.

pub mod events;
#[cfg(test)]
pub mod fake_api;
pub mod informer;
pub mod kube_client;
pub mod leader;
pub mod metrics;
pub mod ratelimit;
pub mod serve;

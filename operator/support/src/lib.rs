//! What every client of imagewatch shares: the one place that builds HTTP clients
//! ([`http`]) and the TTL cache ([`ttl_cache`]). No other crate of the operator sits below it.

pub mod http;
pub mod ttl_cache;

//! A kind cluster with the emulator beside it and a CCM in it: `up` makes one, `down` removes it.

mod aws;
mod config;
mod dns;
mod down;
mod network;
mod tools;
mod up;

pub use down::down;
pub use up::up;

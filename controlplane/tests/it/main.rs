//! The control-plane launcher's integration tests, in one binary: the real upstream control plane on loopback,
//! the simulated kubelets (with kwok), `fakecloud adopt`, the kind path's start-up checks and `stack up|down` (`make up`).

mod adopt;
mod common;
mod control_plane;
mod kind_path;
mod kubelets;
mod stack;

//! What the control-plane tests share.

use std::time::Duration;

/// How long a test waits for something that must happen (the control plane up, a pod CIDR, Nodes Ready or
/// NotReady, an instance terminated) before it calls it a hang: far past anything these take on a busy 2-core
/// CI machine. A hang detector, never a speed claim.
pub const HANG: Duration = Duration::from_secs(180);

//! Ports on 127.0.0.1 for the processes the project starts (etcd, kube-apiserver, kube-controller-manager, a
//! CCM's `--secure-port`): a port is chosen, checked free, and released for the process to bind.
//!
//! The port is taken from outside the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), as HashiCorp's
//! `freeport` does. A port the kernel hands out for `:0` comes from that range, and once released it may become
//! the source port of any outgoing connection on the machine before the process binds it: in CI, beside two kind
//! clusters and their engine, a kube-apiserver exited with "address already in use" so. No connection takes a
//! port outside the range unless something binds it, which the check sees. Within one process the ports handed
//! out never repeat (tests start control planes concurrently); across processes the start is random.

use std::net::{Ipv4Addr, TcpListener};
use std::ops::RangeInclusive;
use std::sync::Mutex;

/// The lowest port handed out: below it are the well-known and common service ports.
const LOWEST: u16 = 10_000;
/// Linux's default ephemeral range, when the machine's cannot be read.
const EPHEMERAL: RangeInclusive<u16> = 32_768..=60_999;

/// A port on 127.0.0.1 that nothing listens on now, outside the ephemeral range.
pub fn free_port() -> std::io::Result<u16> {
    let ephemeral = ephemeral();
    let candidates = candidates(&ephemeral);
    // The next place to try, shared by every caller of this process.
    static NEXT: Mutex<Option<usize>> = Mutex::new(None);
    let mut next = NEXT.lock().unwrap_or_else(|p| p.into_inner());
    let start = *next.get_or_insert_with(|| random() % candidates.len().max(1));
    let (i, port) = first_free(&candidates, start).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("no free port on 127.0.0.1 from {LOWEST} up outside the ephemeral range {}", describe(&ephemeral)),
        )
    })?;
    *next = Some(i + 1);
    Ok(port)
}

/// The first of `candidates` from `start` on (round) that can be bound now, with its place.
fn first_free(candidates: &[u16], start: usize) -> Option<(usize, u16)> {
    (0..candidates.len()).map(|step| (start + step) % candidates.len()).find_map(|i| {
        let port = candidates[i];
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok().then_some((i, port))
    })
}

/// The ports from [`LOWEST`] up that are not in `ephemeral`.
fn candidates(ephemeral: &RangeInclusive<u16>) -> Vec<u16> {
    (LOWEST..=u16::MAX).filter(|p| !ephemeral.contains(p)).collect()
}

/// The machine's ephemeral range (Linux), else the default.
fn ephemeral() -> RangeInclusive<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| parse_range(&s))
        .unwrap_or(EPHEMERAL)
}

fn parse_range(s: &str) -> Option<RangeInclusive<u16>> {
    let mut bounds = s.split_whitespace().map(|b| b.parse::<u16>().ok());
    let (low, high) = (bounds.next()??, bounds.next()??);
    (low <= high).then_some(low..=high)
}

fn describe(r: &RangeInclusive<u16>) -> String {
    format!("{}-{}", r.start(), r.end())
}

/// A random number from the standard library's per-process hash seed (no dependency for one draw).
fn random() -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    usize::try_from(h.finish() >> 32).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_outside_the_ephemeral_range_free_and_not_repeated() {
        let range = ephemeral();
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        for &p in &ports {
            assert!(p >= LOWEST && !range.contains(&p), "{p} is in {}", describe(&range));
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn a_port_in_use_is_passed_over() {
        let candidates = candidates(&ephemeral());
        let port = free_port().unwrap();
        let i = candidates.iter().position(|&c| c == port).unwrap();
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (j, next) = first_free(&candidates, i).unwrap();
        assert!(next != port && j != i, "{port} is held, yet handed out");
        drop(held);
        assert_eq!(first_free(&candidates, i), Some((i, port)), "free again");
        assert_eq!(first_free(&[port], 0), Some((0, port)));
        let _held = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        assert_eq!(first_free(&[port], 0), None, "the only candidate is held");
    }

    #[test]
    fn the_kernel_range_is_read_and_bad_text_falls_back() {
        assert_eq!(parse_range("32768\t60999\n"), Some(32_768..=60_999));
        assert_eq!(parse_range("1024 65535"), Some(1024..=65_535));
        assert_eq!(parse_range("60999 32768"), None);
        assert_eq!(parse_range("nonsense"), None);
        assert_eq!(candidates(&(10_000..=65_535)), Vec::<u16>::new());
        assert_eq!(candidates(&(10_002..=65_535)), vec![10_000, 10_001]);
    }
}

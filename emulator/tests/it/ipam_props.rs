//! Property tests for address allocation: no address is ever held twice, and exhaustion is a clean error.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::Ipv4Addr;

use fakecloud_api::codes;
use fakecloud_emulator::config::{DbLocation, Pool};
use fakecloud_emulator::db::Db;
use fakecloud_emulator::store::ipam;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Allocate,
    Fixed(u32),
    Release(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![4 => Just(Op::Allocate), 1 => (0u32..20).prop_map(Op::Fixed), 2 => (0usize..32).prop_map(Op::Release)],
        1..80,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn allocations_never_collide_and_exhaust_cleanly(ops in ops()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let db = Db::open(&DbLocation::Memory).await.unwrap();
            // A /28: 16 addresses, 13 usable (network, gateway and broadcast reserved).
            let pool = Pool::subnet("subnet:10.9.0.0/28", "10.9.0.0/28".parse().unwrap());
            let mut held: HashMap<String, Ipv4Addr> = HashMap::new();
            let mut owners: Vec<String> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let owner = format!("o{n}");
                let mut tx = db.write().await.unwrap();
                match op {
                    Op::Allocate => match ipam::allocate(&mut tx, &pool, &owner).await {
                        Ok(ip) => {
                            prop_assert!(pool.offset_of(ip).is_some(), "{ip} outside the usable range");
                            prop_assert!(!held.values().any(|h| *h == ip), "{ip} handed out twice");
                            held.insert(owner.clone(), ip);
                            owners.push(owner);
                        }
                        Err(e) => {
                            prop_assert_eq!(e.code, codes::INSUFFICIENT_ADDRESS_CAPACITY);
                            prop_assert_eq!(held.len() as u32, pool.capacity(), "refused while addresses were free");
                        }
                    },
                    Op::Fixed(off) => {
                        let ip = pool.addr(off);
                        let r = ipam::lease_fixed(&mut tx, Some(&pool), ip.into(), &owner).await;
                        match (pool.offset_of(ip).is_some(), held.values().any(|h| *h == ip)) {
                            (false, _) => prop_assert_eq!(r.unwrap_err().code, codes::INVALID_ADDRESS),
                            (true, true) => prop_assert_eq!(r.unwrap_err().code, codes::ADDRESS_IN_USE),
                            (true, false) => {
                                prop_assert!(r.is_ok());
                                held.insert(owner.clone(), ip);
                                owners.push(owner);
                            }
                        }
                    }
                    Op::Release(i) if !owners.is_empty() => {
                        let victim = owners.remove(i % owners.len());
                        ipam::release(&mut tx, &victim).await.unwrap();
                        held.remove(&victim);
                    }
                    Op::Release(_) => {}
                }
                tx.commit().await.unwrap();
            }
            Ok(())
        })?;
    }
}

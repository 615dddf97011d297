//! Group commit seen from the API: concurrent creates share the writer's transactions and the quota still holds
//! exactly (issue #15).

use crate::common::Emu;
use fakecloud_api::{CreateInstanceRequest, ListInstancesQuery, QuotaName, codes};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_creates_against_a_quota_of_fifty_make_exactly_fifty() {
    let emu = Emu::start().await;
    emu.admin.set_quota(QuotaName::Instances, 50).await.unwrap();
    let db = &emu.server.as_ref().unwrap().state.db;
    let before = db.write_stats();
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let c = emu.user.clone();
            let req = CreateInstanceRequest { name: format!("node-{n}"), ..Default::default() };
            tokio::spawn(async move { c.create_instance(&req, None).await })
        })
        .collect();
    let (mut created, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => created += 1,
            Err(e) => {
                assert_eq!((e.status(), e.code()), (Some(422), Some(codes::INSTANCE_LIMIT_EXCEEDED)), "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!((created, refused), (50, 150));
    let listed = emu.user.list_instances(&ListInstancesQuery::default()).await.unwrap();
    assert_eq!(listed.items.len(), 50);
    assert_eq!(emu.user.get_quota(QuotaName::Instances).await.unwrap().usage, Some(50));

    // Every create and every refusal's audit entry was a write; they shared commits.
    let after = db.write_stats();
    let (batches, calls) = (after.batches - before.batches, after.calls - before.calls);
    assert!(calls >= 200, "{calls} writes committed");
    assert!(batches < calls, "{calls} writes in {batches} commits: none shared a batch");
    // The same counts in /metrics.
    let (_, metrics) = emu.raw(reqwest::Method::GET, "/metrics", None, None).await;
    let text = metrics.as_str().unwrap();
    let scraped = |name: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(scraped("fakecloud_write_batches_total") >= after.batches);
    assert!(scraped("fakecloud_write_calls_total") >= after.calls);
}

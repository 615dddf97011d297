//! Hung machines (`/v1/hangs`): named by ID, name or tag, running ones only, listed while in force, ended by a
//! stop of the hang or a restart of the machine; bad requests get clear errors.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{Emu, wait_state};
use fakecloud_api::{CreateInstanceRequest, InstanceState, StartHangRequest, codes};

fn names(req_names: &[&str]) -> StartHangRequest {
    StartHangRequest { names: req_names.iter().map(|n| n.to_string()).collect(), ..Default::default() }
}

#[tokio::test]
async fn a_hung_machine_keeps_running_until_the_hang_is_stopped() {
    let emu = Emu::start().await;
    let a = emu.instance("node-a").await;
    let b = emu.instance("node-b").await;
    let hung = emu.admin.start_hang(&names(&["node-a"])).await.unwrap().items;
    assert_eq!(
        hung.iter().map(|h| (h.instance_id.as_str(), h.name.as_str())).collect::<Vec<_>>(),
        [(a.id.as_str(), "node-a")]
    );
    // Hanging it again keeps the first time; the cloud still says running.
    let again =
        emu.admin.start_hang(&StartHangRequest { instance_ids: vec![a.id.clone()], ..Default::default() }).await;
    assert_eq!(again.unwrap().items[0].since, hung[0].since);
    assert_eq!(emu.user.get_instance(&a.id).await.unwrap().state, InstanceState::Running);
    assert_eq!(emu.admin.list_hangs().await.unwrap().items, hung);

    let stopped = emu.admin.stop_hang(&a.id).await.unwrap();
    assert_eq!(stopped.instance_id, a.id);
    assert!(emu.admin.list_hangs().await.unwrap().items.is_empty());
    let err = emu.admin.stop_hang(&b.id).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(404), Some(codes::HANG_NOT_FOUND)));
}

#[tokio::test]
async fn a_restart_ends_a_hang() {
    let emu = Emu::start().await;
    let a = emu.instance("node-a").await;
    emu.admin.start_hang(&names(&["node-a"])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    emu.user.stop_instance(&a.id).await.unwrap();
    wait_state(&emu.user, &a.id, InstanceState::Stopped).await;
    assert!(emu.admin.list_hangs().await.unwrap().items.is_empty(), "a stopped machine is not hung");
    emu.user.start_instance(&a.id).await.unwrap();
    wait_state(&emu.user, &a.id, InstanceState::Running).await;
    assert!(emu.admin.list_hangs().await.unwrap().items.is_empty(), "the reboot ended the hang");
    // Hung again after the restart: a fresh hang.
    assert_eq!(emu.admin.start_hang(&names(&["node-a"])).await.unwrap().items.len(), 1);
}

#[tokio::test]
async fn a_tag_hangs_its_running_machines_only() {
    let emu = Emu::start().await;
    let tagged = |name: &str| CreateInstanceRequest {
        name: name.into(),
        tags: BTreeMap::from([("pool".to_string(), "a".to_string())]),
        ..Default::default()
    };
    let one = emu.user.create_instance(&tagged("pool-a-1"), None).await.unwrap();
    let two = emu.user.create_instance(&tagged("pool-a-2"), None).await.unwrap();
    emu.instance("other").await;
    emu.user.stop_instance(&two.id).await.unwrap();
    wait_state(&emu.user, &two.id, InstanceState::Stopped).await;
    let req = StartHangRequest { tag: Some("pool=a".into()), ..Default::default() };
    let hung = emu.admin.start_hang(&req).await.unwrap().items;
    assert_eq!(hung.iter().map(|h| h.instance_id.as_str()).collect::<Vec<_>>(), [one.id.as_str()]);
}

#[tokio::test]
async fn bad_hang_requests_are_refused_with_what_to_fix() {
    let emu = Emu::start().await;
    let a = emu.instance("node-a").await;
    let err = emu.admin.start_hang(&StartHangRequest::default()).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert!(err.to_string().contains("name the machines to hang"), "{err}");
    let err = emu.admin.start_hang(&names(&["nobody"])).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(404), Some(codes::INSTANCE_NOT_FOUND)));
    let err = emu.admin.start_hang(&StartHangRequest { tag: Some("=x".into()), ..Default::default() }).await;
    assert_eq!(err.unwrap_err().status(), Some(400));
    emu.user.stop_instance(&a.id).await.unwrap();
    wait_state(&emu.user, &a.id, InstanceState::Stopped).await;
    let err = emu.admin.start_hang(&names(&["node-a"])).await.unwrap_err();
    assert_eq!((err.status(), err.code()), (Some(409), Some(codes::INCORRECT_INSTANCE_STATE)));
    assert!(err.to_string().contains("only a running machine can hang"), "{err}");
    // The admin's: the user token may neither hang nor look.
    assert_eq!(emu.user.start_hang(&names(&["node-a"])).await.unwrap_err().status(), Some(403));
    assert_eq!(emu.user.list_hangs().await.unwrap_err().status(), Some(403));
}

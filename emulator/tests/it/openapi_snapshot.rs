//! The OpenAPI document that ccm-upstream's Go client is generated from (`api/openapi.json`, beside the API's
//! Rust types) is the
//! one the emulator serves: a change to the API fails here until the snapshot and the client are regenerated,
//! so the Go client cannot drift silently. `FAKECLOUD_UPDATE_OPENAPI=1` rewrites the snapshot; then run
//! `go generate ./...` in ccm-upstream.

use std::path::PathBuf;

use crate::common::Emu;
use serde_json::Value;

#[tokio::test]
async fn the_go_clients_openapi_snapshot_is_what_the_emulator_serves() {
    let emu = Emu::start().await;
    let (status, served) = emu.raw(reqwest::Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, 200);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../api/openapi.json");
    if std::env::var_os("FAKECLOUD_UPDATE_OPENAPI").is_some() {
        let text = serde_json::to_string_pretty(&served).expect("the document serializes") + "\n";
        std::fs::write(&path, text).expect("the snapshot is written");
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let snapshot: Value = serde_json::from_str(&text).expect("the snapshot is JSON");
    assert!(
        snapshot == served,
        "{} differs from the document the emulator serves at /openapi.json: regenerate it with \
         `FAKECLOUD_UPDATE_OPENAPI=1 cargo test -p fakecloud-emulator --test it openapi_snapshot`, then the Go client \
         with `cd ccm-upstream && go generate ./...`, and commit both",
        path.display()
    );
}

//! Connections: idle and slow ones are closed after their timeouts, and a flood of idle ones cannot lock other
//! clients out. Against the real binary, over loopback.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::common::{HANG, USER};
use fakecloud_api::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Wait for the server to close `conn` (a read gives 0 bytes or an error), for at most `limit`.
async fn closed_within(conn: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(started.elapsed()), conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the connection was still open after {limit:?}"),
        }
    }
}

#[tokio::test]
async fn idle_and_slow_connections_are_closed_after_their_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--idle-timeout", "1s", "--header-read-timeout", "1s"];
    let (_child, url, _) = crate::common::spawn_emulator_with(&dir.path().join("fc.db"), &flags, None).await;
    let addr = url.trim_start_matches("http://");

    // A connection that never says anything.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let took = closed_within(&mut silent, HANG).await;
    assert!(took >= Duration::from_millis(900), "closed after {took:?}, before the idle timeout");

    // A keep-alive connection after its answer.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut answer = [0u8; 512];
    let n = kept.read(&mut answer).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..n]));
    closed_within(&mut kept, HANG).await;

    // A head that trickles in, a line every 200 ms and never ends: not idle, yet closed at the header-read
    // timeout. Without it the read below would wait for good, so only a hang reaches the bound.
    let slow = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = slow.into_split();
    let trickle = tokio::spawn(async move {
        write.write_all(b"GET /healthz HTTP/1.1\r\n").await?;
        for n in 0.. {
            tokio::time::sleep(Duration::from_millis(200)).await;
            write.write_all(format!("X-Slow-{n}: 1\r\n").as_bytes()).await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let started = Instant::now();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(HANG, read.read(&mut buf)).await;
    let took = started.elapsed();
    assert!(read.is_ok() && took < HANG, "a trickling head held its connection for {took:?}");
    let n = read.unwrap().unwrap_or(0);
    assert!(n == 0 || !buf[..n].starts_with(b"HTTP/1.1 200"), "a trickling head was answered");
    trickle.abort();
}

#[tokio::test]
async fn a_thousand_idle_connections_do_not_lock_other_clients_out() {
    // This process holds 1,100 sockets; the emulator may hold only 256 files, so its default cap is 128.
    fakecloud_emulator::listener::raise_fd_limit();
    let dir = tempfile::tempdir().unwrap();
    // An idle timeout of an hour: a client locked out would wait that long, far past the bound below.
    let flags = ["--idle-timeout", "3600s"];
    let (_child, url, log) = crate::common::spawn_emulator_with(&dir.path().join("fc.db"), &flags, Some(256)).await;
    let addr = url.trim_start_matches("http://").to_string();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        // A connect the emulator's backlog has no room for hangs: stop there (and fail below).
        match tokio::time::timeout(HANG, TcpStream::connect(&addr)).await {
            Ok(Ok(conn)) => idle.push(conn),
            _ => break,
        }
    }
    let client = Client::new(&url, USER).unwrap().with_timeout(HANG).unwrap();
    let started = Instant::now();
    client.region().await.expect("an answer while up to 1,100 connections sit idle");
    assert!(started.elapsed() < HANG, "answered only after {:?}", started.elapsed());
    assert_eq!(idle.len(), 1100, "every connection was taken");
    crate::common::eventually(HANG, "the connection limit to be logged", || async {
        log.lock().unwrap().contains("connection limit reached").then_some(())
    })
    .await;
}

/// A call refused before its body was read (401, 403), whose body arrives after the answer: the answer says
/// `Connection: close`, or else the connection must still serve the next request — a pooling client would send
/// it there.
#[tokio::test]
async fn a_refusal_before_the_body_leaves_the_connection_usable_or_says_close() {
    let emu = crate::common::Emu::start().await;
    let addr = emu.url().trim_start_matches("http://").to_string();
    // Whether the answer says close depends on a race inside hyper: try each case a number of times.
    let cases = ["", "Authorization: Bearer user-token-0123456789abcdef\r\n"];
    for auth in cases.iter().cycle().take(40) {
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        let body = r#"{"limit":5}"#;
        let head = format!(
            "PUT /v1/quotas/instances HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let answer = read_answer(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 401") || answer.starts_with("HTTP/1.1 403"), "{answer}");
        // The body, late, then the next request on the same connection.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let says_close = answer.to_ascii_lowercase().contains("\r\nconnection: close\r\n");
        let _ = conn.write_all(body.as_bytes()).await;
        let _ = conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let next = read_answer(&mut conn).await;
        assert!(says_close || next.starts_with("HTTP/1.1 200"), "no Connection: close, and then {next:?}");
    }
    // A body that was read keeps the connection open.
    let mut conn = TcpStream::connect(&addr).await.unwrap();
    let put = "PUT /v1/quotas/instances HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token-0123456789abcdef\r\n\
               Content-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"limit\":5}";
    for _ in 0..2 {
        conn.write_all(put.as_bytes()).await.unwrap();
        let answer = read_answer(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 200") && !answer.contains("connection: close"), "{answer}");
    }
}

/// One answer: read until its head and the body its `Content-Length` (or its last chunk) says are in, or the
/// server closes. What came until then if neither happens before [`HANG`]: waiting for the whole answer, not for
/// a pause, keeps a slow server from reading as a short one.
async fn read_answer(conn: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 8192];
    let mut got = Vec::new();
    let whole = |got: &[u8]| {
        let text = String::from_utf8_lossy(got).to_ascii_lowercase();
        let Some(end) = text.find("\r\n\r\n") else { return false };
        let head = &text[..end];
        let length =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
        match length {
            Some(length) => got.len() >= end + 4 + length,
            None => head.contains("transfer-encoding: chunked") && text.ends_with("0\r\n\r\n"),
        }
    };
    let _ = tokio::time::timeout(HANG, async {
        while let Ok(n) = conn.read(&mut buf).await {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if whole(&got) {
                break;
            }
        }
    })
    .await;
    String::from_utf8_lossy(&got).into_owned()
}

/// A body that trickles in — a byte every 200 ms, of a declared 100,000 — holds its connection only until the
/// body-read timeout: it is answered 408 and closed, and the clients it would have locked out get answers.
#[tokio::test]
async fn a_trickling_body_is_cut_at_the_body_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--body-read-timeout", "1s", "--max-connections", "4"];
    let (_child, url, _) = crate::common::spawn_emulator_with(&dir.path().join("fc.db"), &flags, None).await;
    let addr = url.trim_start_matches("http://").to_string();
    let mut trickles = Vec::new();
    // As many as the emulator takes connections: without the timeout they would hold every one for good.
    for _ in 0..4 {
        let conn = TcpStream::connect(&addr).await.unwrap();
        let (mut read, mut write) = conn.into_split();
        let head = format!(
            "POST /v1/instances HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {USER}\r\nContent-Type: application/json\r\n\
             Content-Length: 100000\r\n\r\n{{"
        );
        write.write_all(head.as_bytes()).await.unwrap();
        let dripping = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if write.write_all(b" ").await.is_err() {
                    return;
                }
            }
        });
        trickles.push(tokio::spawn(async move {
            let mut answer = Vec::new();
            // Until the server closes: the answer, then the end of the connection.
            let _ = tokio::time::timeout(HANG, read.read_to_end(&mut answer)).await;
            dripping.abort();
            String::from_utf8_lossy(&answer).into_owned()
        }));
    }
    let client = Client::new(&url, USER).unwrap().with_timeout(HANG).unwrap();
    client.region().await.expect("an answer once the trickling bodies are cut");
    for t in trickles {
        let answer = t.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("RequestTimeout") && answer.contains("--body-read-timeout"), "{answer}");
    }
}

/// The audit stream is one long answer: it runs to its `max_seconds` past the idle timeout, and is not closed
/// to make room for new connections at the cap (it is busy, not idle).
#[tokio::test]
async fn a_live_audit_stream_outlasts_the_idle_timeout_and_the_connection_cap() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--idle-timeout", "1s", "--max-connections", "2"];
    let (_child, url, _) = crate::common::spawn_emulator_with(&dir.path().join("fc.db"), &flags, None).await;
    let started = Instant::now();
    let stream = reqwest::Client::new()
        .get(format!("{url}/v1/audit/stream?max_seconds=4"))
        .bearer_auth(crate::common::ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    // New connections, one after another, each a call that the stream then shows; at the cap of two, the idle
    // ones make room, never the stream.
    for _ in 0..3 {
        let fresh = Client::new(&url, USER).unwrap();
        fresh.region().await.unwrap();
    }
    let body = tokio::time::timeout(HANG, stream.text()).await.unwrap().unwrap();
    let lasted = started.elapsed();
    assert!(lasted >= Duration::from_millis(3500), "the stream was cut after {lasted:?}: {body}");
    assert_eq!(body.matches("\"operation\":\"GetRegion\"").count(), 3, "every call is in the stream: {body}");
}

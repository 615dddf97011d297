//! The scenario runner (`fakecloud scenario run`) and the shipped scenarios, the bug reproductions among them.

use std::process::Stdio;

use fakecloud_api::{AuditQuery, Client, QuotaName, SetLbProvisioningRequest};

use crate::{ADMIN, HANG, cli, emulator, eventually, ok, repo};

#[tokio::test]
async fn shipped_scenarios_parse_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    for entry in std::fs::read_dir(repo().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        let out = cli(&url).args(["scenario", "run", "--check"]).arg(&path).output().await.unwrap();
        ok(&out, &format!("check {}", path.display()));
    }
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "steps:\n  - at: 5s\n    wait: true\n  - at: 1s\n    wait: true\n").unwrap();
    let out = cli(&url).args(["scenario", "run", "--check"]).arg(&bad).output().await.unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("steps[1].at"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&bad, "steps:\n  - at: 0s\n    wait: true\n    clear_faults: true\n").unwrap();
    let out = cli(&url).args(["scenario", "run", "--check"]).arg(&bad).output().await.unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 actions"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn every_shipped_scenario_runs_against_a_live_emulator() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    // spot-wave reclaims instances tagged pool=spot: give it one.
    let spot = fakecloud_api::CreateInstanceRequest {
        name: "spot-1".into(),
        market: fakecloud_api::Market::Spot,
        tags: [("pool".to_string(), "spot".to_string())].into(),
        ..Default::default()
    };
    admin.create_instance(&spot, None).await.unwrap();
    // node-hang hangs the machines tagged pool=blue.
    let blue = fakecloud_api::CreateInstanceRequest {
        name: "blue-1".into(),
        tags: [("pool".to_string(), "blue".to_string())].into(),
        ..Default::default()
    };
    admin.create_instance(&blue, None).await.unwrap();
    // compute-outage hangs `make up`'s first node by default.
    let node_a = fakecloud_api::CreateInstanceRequest { name: "node-a".into(), ..Default::default() };
    admin.create_instance(&node_a, None).await.unwrap();
    for entry in std::fs::read_dir(repo().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        // 1/50 of real time: the longest shipped scenario (110 s) takes about 2 s.
        let out = cli(&url).args(["scenario", "run", "--time-scale", "0.02"]).arg(&path).output().await.unwrap();
        let text = ok(&out, &format!("run {}", path.display()));
        assert!(text.contains("restored"), "{}: {text}", path.display());
        if path.ends_with("node-hang.yaml") {
            assert!(text.contains("hung 1 machines: blue-1"), "{text}");
        }
        if path.ends_with("compute-outage.yaml") {
            assert!(text.contains("hung 1 machines: node-a") && text.contains("started outage"), "{text}");
        }
    }
    // Everything the scenarios changed is back; the reclaimed instance stays reclaimed.
    assert!(admin.list_faults().await.unwrap().items.is_empty());
    assert!(admin.list_lb_faults().await.unwrap().items.is_empty(), "lb-flap's data-plane rules are removed");
    assert!(admin.list_rate_limits().await.unwrap().items.is_empty());
    assert!(admin.list_outages().await.unwrap().items.is_empty());
    assert!(admin.list_hangs().await.unwrap().items.is_empty(), "node-hang's machines resume");
    assert_eq!(admin.get_quota(QuotaName::LoadBalancers).await.unwrap().limit, 100);
    assert_eq!(admin.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit, 50);
    let listed = admin.list_all_instances(&Default::default()).await.unwrap();
    assert!(listed[0].interruption_at.is_some());
}

#[tokio::test]
async fn a_scenario_runs_its_steps_in_order_and_on_time_then_restores() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let file = dir.path().join("s.yaml");
    std::fs::write(
        &file,
        "name: test\nsteps:\n  - at: 0s\n    add_fault: {id: region-down, match: {operations: [GetRegion]}, action: {type: error, status: 503, code: ServiceUnavailable}}\n  - at: 800ms\n    set_quota: {name: instances, limit: 7}\n  - at: 10s\n    wait: true\n",
    )
    .unwrap();
    let admin = Client::new(&url, ADMIN).unwrap();
    let started = jiff::Timestamp::now();
    let runner = cli(&url).args(["scenario", "run"]).arg(&file).output();
    // Each change is looked for while the run holds it (the fault from 0 s, the quota from 800 ms, both until the
    // restore after 10 s), not at fixed moments: a runner slow to start on a busy machine only moves the window,
    // and the window is far longer than a busy machine's poll can stall (1.5 s was not, under CI's load).
    let probe = async {
        let during = eventually(HANG, "the fault in force", || async { admin.region().await.is_err().then_some(true) });
        let during = during.await;
        let quota = eventually(HANG, "the quota lowered", || async {
            let limit = admin.get_quota(QuotaName::Instances).await.unwrap().limit;
            (limit == 7).then_some(limit)
        });
        (during, quota.await)
    };
    let (out, (fault_was_on, quota_mid)) = tokio::join!(runner, probe);
    let text = ok(&out.unwrap(), "scenario run");
    assert!(fault_was_on, "the fault was in force during the run");
    assert_eq!(quota_mid, 7);
    assert!(text.contains("1/3 added fault rule region-down") && text.contains("3/3 waited"), "{text}");
    // In order, and the second not early: 800 ms after the run began at the soonest. (Not "800 ms after the
    // first step": on a busy machine the first call can arrive late while the second keeps its time.)
    let audit = admin.audit(&AuditQuery::default()).await.unwrap().items;
    let t = |op: &str| audit.iter().find(|e| e.operation == op).unwrap().time.parse::<jiff::Timestamp>().unwrap();
    assert!(t("AddFault") < t("SetQuota"), "the steps in order");
    let second = t("SetQuota").duration_since(started).as_millis();
    // (799: the log keeps whole milliseconds.)
    assert!(second >= 799, "the 800 ms step {second} ms after the run began");
    // Restored.
    assert!(admin.list_faults().await.unwrap().items.is_empty());
    assert_eq!(admin.get_quota(QuotaName::Instances).await.unwrap().limit, 1000);
}

/// `--background` returns once the steps at 0s are applied (so a command after it finds them in force, with no
/// wait), and its process runs the rest and restores at the end.
#[tokio::test]
async fn a_background_run_returns_with_its_first_steps_applied_and_restores_later() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    let file = dir.path().join("s.yaml");
    std::fs::write(
        &file,
        "name: bg\nsteps:\n  - at: 0s\n    set_quota: {name: load-balancers, limit: 0}\n  - at: 0s\n    set_quota: {name: instances, limit: 5}\n  - at: 10s\n    wait: true\n",
    )
    .unwrap();
    // Held for 10 s: the checks below, right after the return, must come before the restore on a busy machine too.
    // Its standard error to a file, as on a terminal: a pipe read to its end would wait for the background
    // process too, which writes there until it ends.
    let log = dir.path().join("background.log");
    let status = cli(&url)
        .args(["scenario", "run", "--background"])
        .arg(&file)
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .await
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{text}");
    assert!(text.contains("runs on in the background (pid"), "{text}");
    assert_eq!(admin.get_quota(QuotaName::LoadBalancers).await.unwrap().limit, 0, "step 1 applied at return");
    assert_eq!(admin.get_quota(QuotaName::Instances).await.unwrap().limit, 5, "step 2 applied at return");
    let restored = eventually(HANG, "the background run's restore", || async {
        let limit = admin.get_quota(QuotaName::LoadBalancers).await.unwrap().limit;
        (limit != 0).then_some(limit)
    });
    assert!(restored.await > 0);
    assert_eq!(admin.get_quota(QuotaName::Instances).await.unwrap().limit, 1000);

    // A run that cannot apply its first step says so, and fails.
    let down = cli("http://127.0.0.1:1").args(["scenario", "run", "--background"]).arg(&file).output().await.unwrap();
    assert!(!down.status.success());
    assert!(String::from_utf8_lossy(&down.stderr).contains("stopped before its steps at 0s were applied"));
}

fn scenario(url: &str, name: &str, sets: &[&str]) -> tokio::process::Command {
    let mut c = cli(url);
    c.args(["scenario", "run"]).arg(repo().join("scenarios").join(name));
    for set in sets {
        c.args(["--set", set]);
    }
    c
}

/// Run a scenario that holds its changes far past the tests' bound, wait until `seen` finds them in force, then
/// end it as Ctrl-C does (the same putting back as a run's normal end): what `seen` found, and what the run
/// printed. A wait on the changes themselves, not on a window of seconds, which a busy machine's poll can miss.
/// (The runner installs its own SIGINT handler, so a test run that inherited SIGINT ignored still delivers it.)
async fn held_then_interrupted<T, F, Fut>(mut run: tokio::process::Command, what: &str, seen: F) -> (T, String)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let child = run.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let found = eventually(HANG, what, seen).await;
    let pid = child.id().unwrap();
    std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    // Its putting back is a few writes, which can wait seconds behind disk I/O on a busy machine.
    let out = tokio::time::timeout(HANG, child.wait_with_output()).await.unwrap().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "an interrupted run fails: {said}");
    (found, said)
}

/// The bug reproductions (once shell scripts, now scenarios with variables): each holds its change while it
/// runs, with the values `--set` gives, and puts everything back at the end.
#[tokio::test]
async fn the_bug_scenarios_take_their_variables_and_put_everything_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();

    let run = scenario(&url, "route-limit.yaml", &["limit=3", "duration=600"]);
    let (mid, _) = held_then_interrupted(run, "the route quota lowered to the --set value", || async {
        let limit = admin.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit;
        (limit == 3).then_some(limit)
    })
    .await;
    assert_eq!(mid, 3);
    assert_eq!(admin.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit, 50);

    let run = scenario(&url, "throttle.yaml", &["capacity=2", "rate=0.5", "duration=600"]);
    let (bucket, _) = held_then_interrupted(run, "the write bucket as --set says", || async {
        let limits = admin.list_rate_limits().await.unwrap().items;
        limits
            .into_iter()
            .find(|l| l.id == "throttle-writes")
            .map(|l| (l.limit.capacity, l.limit.refill_per_second.unwrap_or_default()))
    })
    .await;
    assert_eq!(bucket, (2, 0.5));

    for (name, sets) in [
        ("pending-lb-outage.yaml", vec!["duration=1"]),
        ("pending-lb-quota.yaml", vec!["duration=1"]),
        ("zone-outage.yaml", vec!["zone=local-1b", "duration=1"]),
        ("chaos.yaml", vec!["duration=1"]),
    ] {
        let text = ok(&scenario(&url, name, &sets).output().await.unwrap(), name);
        assert!(text.contains("restored"), "{name} says it put things back: {text}");
    }
    assert!(admin.list_faults().await.unwrap().items.is_empty());
    assert!(admin.list_rate_limits().await.unwrap().items.is_empty());
    assert!(admin.list_outages().await.unwrap().items.is_empty());
    assert_eq!(admin.get_quota(QuotaName::LoadBalancers).await.unwrap().limit, 100);

    // A variable the file does not declare, or a value its check refuses, is an error before anything runs.
    let out = scenario(&url, "throttle.yaml", &["capcity=2"]).output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("capcity") && said.contains("capacity, duration, rate"), "{said}");
    let out = scenario(&url, "route-limit.yaml", &["limit=-1"]).output().await.unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = scenario(&url, "zone-outage.yaml", &["zone=mars-1a"]).output().await.unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("mars-1a"));
    assert_eq!(admin.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit, 50);
}

#[tokio::test]
async fn ctrl_c_restores_too() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    let run = scenario(&url, "route-limit.yaml", &["limit=4", "duration=600"]);
    let ((), said) = held_then_interrupted(run, "the quota to be lowered", || async {
        (admin.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit == 4).then_some(())
    })
    .await;
    assert!(said.contains("interrupted") && said.contains("restored"), "{said}");
    assert_eq!(admin.get_quota(QuotaName::RoutesPerRouteTable).await.unwrap().limit, 50);
}

/// The whole file is checked before its first step: a bad request in step 2 is found before step 1 has changed
/// anything, by `--check` too, and an absurd `--time-scale` is an error, not a crash.
#[tokio::test]
async fn a_scenario_is_checked_whole_before_its_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    let file = dir.path().join("bad-step-2.yaml");
    std::fs::write(
        &file,
        "steps:\n  - at: 0s\n    set_quota: {name: load-balancers, limit: 2}\n  - at: 1s\n    \
         set_rate_limit: {id: writes, scope: writes, capacity: 0, refill_per_second: 1}\n",
    )
    .unwrap();
    for args in [&["scenario", "run"][..], &["scenario", "run", "--check"]] {
        let out = cli(&url).args(args).arg(&file).output().await.unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(said.contains("steps[1]") && said.contains("capacity"), "{args:?}: {said}");
    }
    assert_eq!(
        admin.get_quota(QuotaName::LoadBalancers).await.unwrap().limit,
        QuotaName::LoadBalancers.default_limit(),
        "step 1 ran"
    );
    // A zone the emulator does not have is found before anything runs too.
    std::fs::write(
        &file,
        "steps:\n  - at: 0s\n    set_quota: {name: load-balancers, limit: 2}\n  - at: 1s\n    \
         start_outage: {scope: zone, zone: mars-1a}\n",
    )
    .unwrap();
    let out = cli(&url).args(["scenario", "run"]).arg(&file).output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("mars-1a"), "{said}");
    assert_eq!(
        admin.get_quota(QuotaName::LoadBalancers).await.unwrap().limit,
        QuotaName::LoadBalancers.default_limit(),
        "step 1 ran"
    );

    let good = std::fs::read_dir(repo().join("scenarios")).unwrap().next().unwrap().unwrap().path();
    for scale in ["1e308", "0", "-1", "NaN", "inf"] {
        let out =
            cli(&url).args(["scenario", "run", &format!("--time-scale={scale}")]).arg(&good).output().await.unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains("--time-scale"), "{scale}: {said}");
        assert!(!said.contains("panicked"), "{scale}: {said}");
    }
}

/// An `lb_provisioning` step holds its setting while the scenario runs; at its end the settings from before it
/// are back (here one for every load balancer, set before the run).
#[tokio::test]
async fn an_lb_provisioning_step_is_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    admin.set_lb_provisioning(&SetLbProvisioningRequest { seconds: 2.0, load_balancer: None }).await.unwrap();
    let before = admin.lb_provisioning().await.unwrap();
    let file = dir.path().join("s.yaml");
    std::fs::write(
        &file,
        "steps:\n  - at: 0s\n    lb_provisioning: {seconds: 30, load_balancer: web}\n  - at: 0s\n    lb_provisioning: {seconds: 9}\n  - at: 600s\n    wait: true\n",
    )
    .unwrap();
    let mut runner = cli(&url);
    runner.args(["scenario", "run"]).arg(&file);
    let ((), text) = held_then_interrupted(runner, "both settings in force", || async {
        let p = admin.lb_provisioning().await.unwrap();
        (p.seconds == Some(9.0) && p.load_balancers.get("web") == Some(&30.0)).then_some(())
    })
    .await;
    assert!(text.contains("provisioning of load balancer web: 30 s"), "{text}");
    assert_eq!(admin.lb_provisioning().await.unwrap(), before);
}

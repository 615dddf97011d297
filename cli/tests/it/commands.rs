//! Commands as a person types them: what they send, and what they print of the answer.

use fakecloud_api::{Client, CreateInstanceRequest, LbFaultAction};

use crate::{ADMIN, cli, emulator, ok, repo};

/// A data-plane latency rule through `lb-fault add`, listed and deleted (the emulator's `dataplane` tests show
/// such a rule holding connections).
#[tokio::test]
async fn lb_fault_add_list_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    let req = CreateInstanceRequest { name: "b1".into(), ..Default::default() };
    let backend = admin.create_instance(&req, None).await.unwrap().id;

    let added = ["lb-fault", "add", "--id", "slow", "--name", "slow-*", "--backend", &backend, "--latency", "400ms"];
    let out = cli(&url).args(added).args(["--jitter", "100ms"]).output().await.unwrap();
    ok(&out, "lb-fault add");
    let rule = &admin.list_lb_faults().await.unwrap().items[0];
    assert_eq!((rule.id.as_str(), rule.action.clone()), ("slow", LbFaultAction::Latency { ms: 400, jitter_ms: 100 }));
    assert_eq!(
        (rule.matcher.names.as_slice(), rule.matcher.backends.as_slice()),
        (&["slow-*".to_string()][..], &[backend][..])
    );

    let listed = ok(&cli(&url).args(["lb-fault", "list"]).output().await.unwrap(), "lb-fault list");
    assert!(listed.contains("latency 400ms+100ms") && listed.contains("slow-*"), "{listed}");
    ok(&cli(&url).args(["lb-fault", "delete", "slow"]).output().await.unwrap(), "lb-fault delete");
    assert!(admin.list_lb_faults().await.unwrap().items.is_empty());
}

/// `ratelimit preset NAME` installs a cloud's throttling (replacing another preset's), `ratelimit preset list`
/// shows which is installed and its quota refusals, `ratelimit preset clear` removes it, and `--help` says what
/// each preset does.
#[tokio::test]
async fn ratelimit_preset_installs_replaces_and_clears() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();
    let ids = async || {
        let mut ids: Vec<String> = admin.list_rate_limits().await.unwrap().items.into_iter().map(|l| l.id).collect();
        ids.sort();
        ids
    };

    let help = ok(&cli(&url).args(["ratelimit", "preset", "--help"]).output().await.unwrap(), "preset --help");
    for says in
        ["aws-ec2", "503 RequestLimitExceeded", "aws-elb", "azure-arm", "HighCostGet3Min", "gcp-compute", "clear"]
    {
        assert!(help.contains(says), "--help does not say {says:?}: {help}");
    }

    ok(&cli(&url).args(["ratelimit", "preset", "aws-ec2"]).output().await.unwrap(), "preset aws-ec2");
    let printed = ok(&cli(&url).args(["ratelimit", "preset", "azure-arm"]).output().await.unwrap(), "preset azure-arm");
    assert!(printed.contains("azure-arm-compute-high-cost-get") && printed.contains("every 180s"), "{printed}");
    assert_eq!(
        ids().await,
        ["azure-arm-compute-high-cost-get", "azure-arm-subscription-reads", "azure-arm-subscription-writes"]
    );
    let listed = ok(&cli(&url).args(["ratelimit", "preset", "list"]).output().await.unwrap(), "preset list");
    let azure = listed.lines().find(|l| l.trim_start().starts_with("azure-arm")).unwrap_or_default();
    assert!(azure.contains("true") && azure.contains("instances 409 OperationNotAllowed"), "{listed}");
    assert!(listed.contains("403 QUOTA_EXCEEDED"), "{listed}");

    // A limit set by name stays: a fixed window on a class of operations, as the book shows it.
    let costly = [
        "ratelimit",
        "set",
        "costly",
        "--scope",
        "operations",
        "--operation",
        "ListInstances",
        "--operation",
        "GetInstance",
        "--capacity",
        "160",
        "--window",
        "180s",
        "--no-retry-after",
        "--remaining-header",
        "x-ms-ratelimit-remaining-resource",
        "--remaining-format",
        "Microsoft.Compute/HighCostGet3Min;{remaining}",
    ];
    ok(&cli(&url).args(costly).output().await.unwrap(), "ratelimit set --window");
    ok(&cli(&url).args(["ratelimit", "preset", "clear"]).output().await.unwrap(), "preset clear");
    let left = admin.list_rate_limits().await.unwrap().items;
    let [costly] = &left[..] else { panic!("only the limit set by name is left: {left:?}") };
    assert_eq!(
        (costly.id.as_str(), costly.limit.window_seconds, costly.limit.retry_after),
        ("costly", Some(180), false)
    );
    assert_eq!(costly.limit.operations, ["ListInstances", "GetInstance"]);
    let half =
        cli(&url).args(["ratelimit", "set", "x", "--capacity", "1", "--window", "1500ms"]).output().await.unwrap();
    assert!(!half.status.success() && String::from_utf8_lossy(&half.stderr).contains("whole seconds"));
    let out = cli(&url).args(["ratelimit", "preset", "aws-ec3"]).output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("aws-ec2") && said.contains("gcp-compute"), "{said}");
}

/// `lb provisioning set|show|clear` scripts how long new load balancers stay provisioning, for every one or
/// one name, and a bad value is refused with the API's message.
#[tokio::test]
async fn lb_provisioning_set_show_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let admin = Client::new(&url, ADMIN).unwrap();

    ok(&cli(&url).args(["lb", "provisioning", "set", "5"]).output().await.unwrap(), "provisioning set");
    let set = ["lb", "provisioning", "set", "0.5", "--load-balancer", "web"];
    let printed = ok(&cli(&url).args(set).output().await.unwrap(), "provisioning set --load-balancer");
    assert!(printed.contains("every load balancer") && printed.contains("5s"), "{printed}");
    assert!(printed.contains("load balancer web") && printed.contains("0.5s"), "{printed}");
    let shown = admin.lb_provisioning().await.unwrap();
    assert_eq!((shown.seconds, shown.load_balancers.get("web")), (Some(5.0), Some(&0.5)));
    let listed = ok(&cli(&url).args(["lb", "provisioning", "show"]).output().await.unwrap(), "provisioning show");
    assert!(listed.contains("default (serve --lb-provision-delay)"), "{listed}");

    let out = cli(&url).args(["lb", "provisioning", "set", "7200"]).output().await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("seconds: must be between 0 and 3600"), "{err}");

    let clear = ["lb", "provisioning", "clear", "--load-balancer", "web"];
    ok(&cli(&url).args(clear).output().await.unwrap(), "provisioning clear --load-balancer");
    assert_eq!(admin.lb_provisioning().await.unwrap().load_balancers.len(), 0);
    ok(&cli(&url).args(["lb", "provisioning", "clear"]).output().await.unwrap(), "provisioning clear");
    assert_eq!(admin.lb_provisioning().await.unwrap().seconds, None);
}

/// `serve --db` with a database URL it cannot use is refused before anything is made: the message says what to
/// give instead, or why the database cannot be reached, and no file or directory named after the URL appears. A
/// file that is not a database is refused too, and leaves no credentials file behind.
#[tokio::test]
async fn serve_refuses_a_database_url_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |db: &'static str| {
        let mut cmd = cli("http://127.0.0.1:1");
        cmd.current_dir(dir.path()).args(["serve", "--listen", "127.0.0.1:0", "--db", db]);
        cmd
    };
    let out = serve("mysql://fc@127.0.0.1/fakecloud").output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("mysql:// URL") && said.contains("sqlite://PATH"), "{said}");
    // A PostgreSQL server that is not there: said so, with the URL's password never shown.
    let out = serve("postgres://fc:hunter2@127.0.0.1:1/fakecloud").output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("nothing answers there") && said.contains("postgres://fc:***@"), "{said}");
    assert!(!said.contains("hunter2"), "{said}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing is created: {left:?}");

    // A file that is not a database: refused, and the tokens made for it removed again.
    std::fs::write(dir.path().join("notes.db"), "not a database\n").unwrap();
    let out = cli("http://127.0.0.1:1")
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0", "--db", "notes.db"])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("not a SQLite database"), "{said}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["notes.db"], "no credentials file left behind");
}

/// `fakecloud migrate` applies the schema without serving and says the version; a PostgreSQL server that does not
/// answer is said plainly (the PostgreSQL side is tested against a real server in the emulator's tests).
#[tokio::test]
async fn migrate_prepares_a_database_and_says_why_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let migrate = |db: &str| {
        let mut cmd = cli("http://127.0.0.1:1");
        cmd.current_dir(dir.path()).args(["migrate", "--db", db]);
        cmd
    };
    let out = ok(&migrate("fc.db").output().await.unwrap(), "migrate");
    let newest = std::fs::read_dir(repo().join("emulator/migrations")).unwrap().count();
    assert_eq!(out.trim(), format!("fc.db: schema at version {newest}"));
    assert_eq!(ok(&migrate("fc.db").output().await.unwrap(), "migrate again"), out);

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = migrate(&format!("postgres://fc:secret@127.0.0.1:{closed}/fc")).output().await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("is PostgreSQL running") && said.contains("postgres://fc:***@"), "{said}");
    assert!(!said.contains("secret"), "{said}");
}

/// `account create` prints the new account's tokens as lines to `source`; with them the other commands act in
/// that account alone; `account list` and `account delete` manage it.
#[tokio::test]
async fn account_create_prints_tokens_to_source_and_delete_ends_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    let printed = ok(&cli(&url).args(["account", "create", "ci-job-1"]).output().await.unwrap(), "account create");
    let token = |var: &str| {
        let line = printed.lines().find_map(|l| l.strip_prefix(&format!("export {var}=")));
        line.unwrap_or_else(|| panic!("no {var} line: {printed}")).to_string()
    };
    let (user, admin) = (token("FAKECLOUD_USER_TOKEN"), token("FAKECLOUD_ADMIN_TOKEN"));
    // And the AWS keys its AWS face takes, derived from its user token.
    let aws = fakecloud_emulator::aws::credentials::Keys::of(&fakecloud_emulator::auth::Tokens {
        user: user.clone(),
        admin: admin.clone(),
    });
    assert_eq!(
        (token("AWS_ACCESS_KEY_ID"), token("AWS_SECRET_ACCESS_KEY")),
        (aws.access_key_id, aws.secret_access_key)
    );
    let in_account = |token: &str| {
        let mut c = cli(&url);
        c.env("FAKECLOUD_USER_TOKEN", token).env("FAKECLOUD_ADMIN_TOKEN", &admin);
        c
    };
    ok(&in_account(&user).args(["instance", "create", "node-0"]).output().await.unwrap(), "instance create");
    let theirs = ok(&in_account(&user).args(["instance", "list"]).output().await.unwrap(), "instance list");
    assert!(theirs.contains("node-0"), "{theirs}");
    let own = ok(&cli(&url).args(["instance", "list"]).output().await.unwrap(), "instance list");
    assert!(!own.contains("node-0"), "the emulator's own cloud shows the account's instance: {own}");
    let listed = ok(&cli(&url).args(["account", "list"]).output().await.unwrap(), "account list");
    assert!(listed.contains("ci-job-1"), "{listed}");
    let refused = in_account(&user).args(["account", "list"]).output().await.unwrap();
    assert!(!refused.status.success(), "an account's admin token lists accounts");
    ok(&cli(&url).args(["account", "delete", "ci-job-1"]).output().await.unwrap(), "account delete");
    let gone = in_account(&user).args(["instance", "list"]).output().await.unwrap();
    assert!(!gone.status.success(), "a deleted account's token still works");
    assert!(String::from_utf8_lossy(&gone.stderr).contains("401"), "{gone:?}");
}

/// `lease take` prints the account's tokens to `source`; `lease renew` extends it (shown by `account list`);
/// `lease release` wipes the account, so the tokens stop working.
#[tokio::test]
async fn lease_take_renew_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let (_emulator, url) = emulator(dir.path()).await;
    ok(&cli(&url).args(["account", "create", "pool-1"]).output().await.unwrap(), "account create");
    let take = ["lease", "take", "--holder", "job-9", "--ttl", "10m"];
    let printed = ok(&cli(&url).args(take).output().await.unwrap(), "lease take");
    assert!(printed.contains("# account pool-1, leased until "), "{printed}");
    let user = printed.lines().find_map(|l| l.strip_prefix("export FAKECLOUD_USER_TOKEN=")).unwrap().to_string();
    let listed = ok(&cli(&url).args(["account", "list"]).output().await.unwrap(), "account list");
    assert!(listed.contains("job-9"), "{listed}");
    let renew = ["lease", "renew", "pool-1", "--holder", "job-9", "--ttl", "1h"];
    ok(&cli(&url).args(renew).output().await.unwrap(), "lease renew");
    let not_theirs = ["lease", "renew", "pool-1", "--holder", "job-10", "--ttl", "1h"];
    let refused = cli(&url).args(not_theirs).output().await.unwrap();
    assert!(String::from_utf8_lossy(&refused.stderr).contains("leased by \"job-9\""), "{refused:?}");
    ok(&cli(&url).args(["lease", "release", "pool-1"]).output().await.unwrap(), "lease release");
    let mut with_old = cli(&url);
    with_old.env("FAKECLOUD_USER_TOKEN", &user).env_remove("FAKECLOUD_ADMIN_TOKEN");
    let gone = with_old.args(["instance", "list"]).output().await.unwrap();
    assert!(String::from_utf8_lossy(&gone.stderr).contains("401"), "{gone:?}");
}

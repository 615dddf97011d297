//! `fakecloud-controlplane stack up|down` (what `make up` and `make down` run), end to end: a fleet too large
//! for the cluster CIDR refused, up with 4 Nodes in a fresh run directory on free ports (each stage's time
//! said), a second up refused, the README's session and its two bugs run on it as written (the session's load
//! balancer's DNS name answering at the stack's DNS port), down, and no process of the run directory left.
//!
//! Needs the control-plane binaries and `fakecloud` and `fakecloud-ccm` beside the launcher (`make test` builds
//! them first); without them it is skipped outside CI, as the other tests here, and fails under CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fakecloud_controlplane::Binaries;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_fakecloud-controlplane");
/// How long one DNS lookup may take: only a hang takes this long.
const DNS_HANG: std::time::Duration = std::time::Duration::from_secs(60);

fn free_port() -> u16 {
    fakecloud_controlplane::ports::free_port().expect("a free port")
}

fn stack(args: &[&str], run_dir: &Path) -> Output {
    Command::new(LAUNCHER).arg("stack").args(args).arg("--run-dir").arg(run_dir).output().expect("the launcher runs")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// PIDs of processes naming `dir` on their command line.
fn processes_naming(dir: &Path) -> Vec<u32> {
    let dir = dir.to_string_lossy();
    let entries = std::fs::read_dir("/proc").expect("/proc");
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline).contains(&*dir).then_some(pid)
        })
        .collect()
}

/// The addresses `name` has at the stack's DNS port, or why not.
fn resolve(dns_port: &str, name: &str) -> Result<Vec<std::net::IpAddr>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let dns = format!("127.0.0.1:{dns_port}");
    runtime.block_on(fakecloud_controlplane::names::resolve(&dns, name, DNS_HANG))
}

/// Runs `stack down` on its run directory when dropped, if the directory is still there: a test that fails
/// part way leaves no stack behind.
struct Down<'a>(&'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = stack(&["down"], self.0);
        }
    }
}

#[test]
fn up_refuses_a_second_up_and_down_leaves_nothing() {
    let Some(binaries) = Binaries::for_tests("stack up/down") else {
        return;
    };
    let beside: PathBuf = Path::new(LAUNCHER).parent().expect("the launcher's directory").to_path_buf();
    if let Some(missing) = ["fakecloud", "fakecloud-ccm"].into_iter().find(|b| !beside.join(b).is_file()) {
        let why = format!("no {missing} in {} (cargo build --bin {missing})", beside.display());
        // As the control plane's binaries: under CI (`make test` builds them first) missing is a failure.
        assert!(std::env::var_os("CI").is_none(), "stack up/down: {why}");
        eprintln!("skipping stack up/down: {why}");
        return;
    }
    let parent = tempfile::tempdir().expect("a temporary directory");
    let run_dir = parent.path().join("run");
    let (port, ccm_port, dns_port) = (free_port().to_string(), free_port().to_string(), free_port().to_string());

    // More Nodes than the cluster CIDR holds: refused before anything starts.
    let too_many = stack(&["up", "--port", &port, "--ccm-port", &ccm_port, "--nodes", "9000"], &run_dir);
    assert!(!too_many.status.success() && text(&too_many).contains("between 1 and 8192"), "{}", text(&too_many));
    assert!(!run_dir.exists(), "a refused up makes nothing");

    let up =
        stack(&["up", "--port", &port, "--ccm-port", &ccm_port, "--dns-port", &dns_port, "--nodes", "4"], &run_dir);
    let _stopped_if_the_test_fails = Down(&run_dir);
    assert!(up.status.success(), "stack up failed:\n{}", text(&up));
    for says in [
        "fakecloud is up",
        "up: 4 Nodes Ready, initialized and routed",
        "stages: the control plane",
        "node-1, node-2, node-3, node-4",
    ] {
        assert!(text(&up).contains(says), "up does not say {says:?}: {}", text(&up));
    }
    for file in ["fakecloud.credentials", "ccm.log", "emulator.log", "kubelets.log", "ccm.pid"] {
        assert!(run_dir.join(file).is_file(), "{file} missing from {}", run_dir.display());
    }
    assert!(run_dir.join("controlplane/kubeconfigs/admin.kubeconfig").is_file());
    assert!(!processes_naming(&run_dir).is_empty(), "the stack runs on after up returned");

    readme_session(&run_dir, &port, &dns_port, &beside, &binaries);

    let again = stack(&["up", "--port", &port, "--ccm-port", &ccm_port], &run_dir);
    assert!(!again.status.success(), "a second up must refuse");
    assert!(text(&again).contains("already up"), "{}", text(&again));

    let down = stack(&["down"], &run_dir);
    assert!(down.status.success(), "stack down failed:\n{}", text(&down));
    assert!(!run_dir.exists(), "down removes the run directory it made");
    assert_eq!(processes_naming(&run_dir), Vec::<u32>::new(), "processes of the run directory left");
}

/// A `sh` block of the README, the first after `marker`, as a bash script: each line but `make ...` as written
/// (without its comment), but for this stack's run directory and port and this build's binaries, a watch (`-w`)
/// run once, and a scenario's minute cut to 15 s. How many commands it holds, too.
fn readme_script(readme: &str, marker: &str, run_dir: &Path, port: &str, binaries_dir: &Path) -> (String, usize) {
    let block = readme
        .split(marker)
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .unwrap_or_else(|| panic!("the README has a sh block after {marker:?}"));
    let (mut script, mut lines) = (String::new(), 0);
    for line in block.lines() {
        let command = line.split("  #").next().unwrap_or_default().trim();
        if command.is_empty() || command.starts_with("make ") {
            continue;
        }
        let command = command
            .replace("$PWD/.run", &run_dir.display().to_string())
            .replace(".run/", &format!("{}/", run_dir.display()))
            .replace("$PWD/target/debug", &binaries_dir.display().to_string())
            .replace("127.0.0.1:8787", &format!("127.0.0.1:{port}"))
            .replace(".yaml", ".yaml --set duration=15")
            .replace(" -w ", " ");
        script.push_str(command.strip_suffix(" -w").unwrap_or(&command));
        script.push('\n');
        lines += 1;
    }
    (script, lines)
}

fn bash(script: &str) -> (bool, String) {
    // From the repository, where the README's paths (scenarios/) start.
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .expect("bash runs");
    (out.status.success(), text(&out))
}

/// Polls `check` every second until it says done (`None`), at most 120 s (the CCM retries 5 s after a failure,
/// the scenarios last 15 s); fails with the last thing it said.
fn eventually(what: &str, check: impl Fn() -> Option<String>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let Some(said) = check() else { return };
        assert!(std::time::Instant::now() < deadline, "{what}:\n{said}");
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The README's "A session" run on a stack up (issue #48: the front door's commands cannot rot), in one bash
/// with `set -e`; then what its comments promise, waited for: the Service's address, the fault's Warning and the
/// CCM's success, and the audit's 503s then a 201. Then the two bugs users come with, on the same stack, both
/// at once (their scenarios change different quotas): what their comments promise, waited for too.
fn readme_session(run_dir: &Path, port: &str, dns_port: &str, binaries_dir: &Path, control_plane: &Binaries) {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("README");
    let mut env = String::from("set -euo pipefail\n");
    if let Some(kubectl) = control_plane.kubectl() {
        env.push_str(&format!("export PATH={}:$PATH\n", kubectl.parent().expect("its directory").display()));
    }
    let (session, lines) = readme_script(&readme, "## A session", run_dir, port, binaries_dir);
    assert!(lines >= 7, "the session's commands were found: {session}");
    let (ok, said) = bash(&format!("{env}{session}"));
    assert!(ok, "the README's session failed:\n{session}\n{said}");

    env.extend(
        session.lines().filter(|l| l.starts_with("export ") || l.starts_with("source ")).map(|l| format!("{l}\n")),
    );
    let check = |command: &str| bash(&format!("{env}{command}")).1;
    eventually("the session's promises were not kept", || {
        let events = check("kubectl get events --field-selector involvedObject.name=web");
        let audit = check("fakecloud audit --operation CreateLoadBalancer");
        let svc = check("kubectl get svc web -o jsonpath='{.status.loadBalancer.ingress[0].ip}'");
        let done = events.contains("SyncLoadBalancerFailed")
            && events.contains("EnsuredLoadBalancer")
            && audit.matches(" 503 ").count() >= 4
            && audit.contains(" 201 ")
            && !svc.trim().is_empty();
        (!done).then(|| format!("events: {events}\naudit: {audit}\naddress: {svc}"))
    });
    // Its load balancer's DNS name answers the EXTERNAL-IP at the stack's DNS port.
    let ip = check("kubectl get svc web -o jsonpath='{.status.loadBalancer.ingress[0].ip}'");
    let listed: serde_json::Value = serde_json::from_str(&check("fakecloud lb list -o json")).expect("lb list's JSON");
    let web = listed.as_array().into_iter().flatten().find(|lb| lb["address"] == ip.trim());
    let name =
        web.and_then(|lb| lb["dns_name"].as_str()).unwrap_or_else(|| panic!("no load balancer at {ip}: {listed}"));
    let found = resolve(dns_port, name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(found, [ip.trim().parse::<std::net::IpAddr>().expect("an address")], "{name}");

    for (bug, marker) in [("pending", "**\"My LoadBalancer is stuck"), ("route limit", "**\"Nodes stay")] {
        let (script, lines) = readme_script(&readme, marker, run_dir, port, binaries_dir);
        assert!(lines >= 2, "the {bug} bug's commands were found: {script}");
        let (ok, said) = bash(&format!("{env}{script}"));
        assert!(ok, "the README's {bug} bug failed:\n{script}\n{said}");
    }
    eventually("the pending bug's promises were not kept", || {
        let events = check("kubectl get events --field-selector involvedObject.name=api");
        let svc = check("kubectl get svc api -o jsonpath='{.status.loadBalancer.ingress[0].ip}'");
        let done = events.contains("SyncLoadBalancerFailed")
            && events.contains("LoadBalancerLimitExceeded")
            && !svc.trim().is_empty();
        (!done).then(|| format!("events: {events}\naddress: {svc}"))
    });
    eventually("the route limit bug's promises were not kept", || {
        let events = check("kubectl get events --field-selector reason=FailedToCreateRoute");
        let routed = check(
            "kubectl get node extra-1 -o jsonpath='{.status.conditions[?(@.type==\"NetworkUnavailable\")].reason}'",
        );
        let done = events.contains("RouteLimitExceeded") && routed.trim() == "RouteCreated";
        (!done).then(|| format!("events: {events}\nextra-1's NetworkUnavailable: {routed}"))
    });
}

/// `stack up --ccm aws` (`make up CCM=aws`, issue #50): the real cloud-provider-aws, unmodified, on the emulator's
/// AWS face. Its Nodes are named by their instances' private DNS names and initialized by it (the providerID
/// `aws:///<zone>/<i-…>`, the zone and instance-type labels), each routed through the cluster's tagged route
/// table to its instance; a classic ELB and an NLB made for Services get the hostnames AWS gives them, with the
/// Nodes behind them, and are gone with their Services. And kops#4918 replayed: a Node past the route table's
/// limit stays NetworkUnavailable with AWS's RouteLimitExceeded, and is routed once the limit is raised.
///
/// Needs cloud-provider-aws and the AWS CLI, as `make test-aws-ccm` gives them (FAKECLOUD_AWS_CCM,
/// FAKECLOUD_AWS_CLI); without them it is skipped — CI runs it only through that target (the README says why).
#[test]
fn up_with_cloud_provider_aws_initializes_routes_and_load_balances() {
    let (Some(aws_ccm), Some(aws_cli)) =
        (std::env::var("FAKECLOUD_AWS_CCM").ok(), std::env::var("FAKECLOUD_AWS_CLI").ok())
    else {
        eprintln!(
            "skipping stack up --ccm aws: FAKECLOUD_AWS_CCM and FAKECLOUD_AWS_CLI are unset (make test-aws-ccm sets them)"
        );
        return;
    };
    let Some(binaries) = Binaries::for_tests("stack up --ccm aws") else {
        return;
    };
    let parent = tempfile::tempdir().expect("a temporary directory");
    let run_dir = parent.path().join("run");
    let (port, ccm_port, dns_port) = (free_port().to_string(), free_port().to_string(), free_port().to_string());
    let aws_flags = ["--ccm", "aws", "--aws-ccm", &aws_ccm, "--aws-cli", &aws_cli];
    let ports = ["up", "--port", &port, "--ccm-port", &ccm_port, "--dns-port", &dns_port, "--nodes", "3"];
    let up = stack(&[&ports[..], &aws_flags[..]].concat(), &run_dir);
    let _stopped_if_the_test_fails = Down(&run_dir);
    assert!(up.status.success(), "stack up --ccm aws failed:\n{}", text(&up));
    for says in ["cloud-provider-aws", "up: 3 Nodes Ready, initialized and routed", "aws.env"] {
        assert!(text(&up).contains(says), "up does not say {says:?}: {}", text(&up));
    }

    let kubectl = binaries.kubectl().map_or("kubectl".into(), |k| k.display().to_string());
    let kubeconfig = run_dir.join("controlplane/kubeconfigs/admin.kubeconfig");
    let env = format!(
        "set -euo pipefail\nexport KUBECONFIG={}\nsource {}\nk() {{ {kubectl} \"$@\"; }}\naws() {{ {aws_cli} \"$@\"; }}\n",
        kubeconfig.display(),
        run_dir.join("aws.env").display()
    );
    let check = |command: &str| {
        let (ok, said) = bash(&format!("{env}{command}"));
        assert!(ok, "{command}:\n{said}");
        said
    };

    // Nodes as on EC2, initialized by the AWS CCM from DescribeInstances, routed by its route controller.
    let nodes = check(
        "k get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.providerID} \
         {.metadata.labels.topology\\.kubernetes\\.io/zone} {.metadata.labels.node\\.kubernetes\\.io/instance-type} \
         {.spec.podCIDR}{\"\\n\"}{end}'",
    );
    let routes = check(
        "aws ec2 describe-route-tables --filters Name=tag-key,Values=kubernetes.io/cluster/fakecloud \
         --query 'RouteTables[].Routes[].[DestinationCidrBlock,InstanceId]' --output text",
    );
    let nodes: Vec<Vec<&str>> = nodes.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for node in &nodes {
        let [name, provider_id, zone, instance_type, pod_cidr] = node[..] else { panic!("a Node's fields: {node:?}") };
        assert!(name.starts_with("ip-10-") && name.ends_with(".compute.internal"), "{name}");
        let instance = provider_id.strip_prefix(&format!("aws:///{zone}/")).unwrap_or_else(|| panic!("{provider_id}"));
        assert!(instance.starts_with("i-") && instance.len() == 19, "{provider_id}");
        assert!(!instance_type.is_empty(), "{name} has no instance type label");
        assert!(
            routes.contains(&format!("{pod_cidr}\t{instance}")),
            "{name}'s {pod_cidr} is not routed to {instance}:\n{routes}"
        );
    }

    // A classic ELB by default, an NLB by the annotation: each a hostname, the Nodes behind it.
    check(
        "k create service loadbalancer classic --tcp=80:8080\n\
         k create service loadbalancer network --tcp=80:8080 --dry-run=client -o yaml | \
         k annotate -f - --local -o yaml service.beta.kubernetes.io/aws-load-balancer-type=nlb | k apply -f -",
    );
    eventually("the Services have no hostnames", || {
        let hosts =
            check("k get svc classic network -o jsonpath='{.items[*].status.loadBalancer.ingress[0].hostname}'");
        // Each named as its cloud names it: the classic ELB in AWS's zone (cloud-provider-aws tells a classic ELB
        // by it), the NLB in AWS's form for it.
        let both = match hosts.split_whitespace().collect::<Vec<_>>()[..] {
            [classic, network] => {
                classic.ends_with(".local-1.elb.amazonaws.com") && network.ends_with(".elb.local-1.amazonaws.com")
            }
            _ => false,
        };
        (!both).then(|| format!("hostnames: {hosts}\n{}", check("k get events")))
    });
    // Each hostname resolves at the stack's DNS port, as an ELB's does on AWS: the classic ELB's at once, the
    // NLB's once it is active (AWS names it while it provisions, and so does the face).
    let hosts = check("k get svc classic network -o jsonpath='{.items[*].status.loadBalancer.ingress[0].hostname}'");
    for host in hosts.split_whitespace() {
        eventually(&format!("{host} does not resolve"), || match resolve(&dns_port, host) {
            Ok(found) if found.len() == 1 => None,
            Ok(found) => Some(format!("addresses: {found:?}")),
            Err(e) => Some(e),
        });
    }
    let behind = check(
        "aws elb describe-load-balancers --query 'LoadBalancerDescriptions[].Instances[].InstanceId' --output text\n\
         aws elbv2 describe-target-health --target-group-arn \"$(aws elbv2 describe-target-groups \
         --query 'TargetGroups[0].TargetGroupArn' --output text)\" --query 'TargetHealthDescriptions[].Target.Id' --output text",
    );
    for node in &nodes {
        let instance = node[1].rsplit('/').next().unwrap_or_default();
        assert_eq!(behind.matches(instance).count(), 2, "{instance} is not behind both load balancers:\n{behind}");
    }

    // kops#4918, the route table at its limit: the 4th Node's route refused with AWS's RouteLimitExceeded, the
    // Node NetworkUnavailable and told why, and routed once the quota is back (the scenario restores it).
    let fakecloud = Path::new(LAUNCHER).parent().expect("the launcher's directory").join("fakecloud");
    check(&format!(
        "source {creds}\nexport FAKECLOUD_ENDPOINT=http://127.0.0.1:{port}\n\
         {fc} scenario run --background scenarios/route-limit.yaml --set limit=3 --set duration=15\n\
         {fc} instance create extra-1 --tag kubernetes.io/cluster/fakecloud=owned",
        creds = run_dir.join("fakecloud.credentials").display(),
        fc = fakecloud.display(),
    ));
    let fourth = r#"k get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="NetworkUnavailable")].reason}{"\n"}{end}' | grep -v " RouteCreated$" || true"#;
    eventually("the 4th Node's route is not refused as on AWS", || {
        let events = check("k get events --field-selector reason=FailedToCreateRoute");
        let unrouted = check(fourth);
        let done = events.contains("RouteLimitExceeded") && unrouted.lines().count() == 1;
        (!done).then(|| format!("events: {events}\nNodes not routed: {unrouted}"))
    });
    eventually("the 4th Node is not routed once the quota is back", || {
        let unrouted = check(fourth);
        (!unrouted.trim().is_empty()).then(|| format!("Nodes not routed: {unrouted}"))
    });

    check("k delete svc classic network");
    eventually("the load balancers outlive their Services", || {
        let left = check(
            "aws elb describe-load-balancers --query 'LoadBalancerDescriptions[].LoadBalancerName' --output text\n\
             aws elbv2 describe-load-balancers --query 'LoadBalancers[].LoadBalancerName' --output text\n\
             aws elbv2 describe-target-groups --query 'TargetGroups[].TargetGroupName' --output text",
        );
        (!left.trim().is_empty()).then_some(left)
    });

    let down = stack(&["down"], &run_dir);
    assert!(down.status.success(), "stack down failed:\n{}", text(&down));
    assert_eq!(processes_naming(&run_dir), Vec::<u32>::new(), "processes of the run directory left");
}

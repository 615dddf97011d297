//! The CLI's reference in the book (`docs/book/src/cli.md`) is every command's `--help` as this build prints it,
//! run by trycmd: a flag added, renamed or explained anew fails here until the page says the same
//! (`TRYCMD=overwrite cargo test -p fakecloud-cli --test it help` writes it in).

use clap::CommandFactory;

/// The page, from this crate's directory.
const PAGE: &str = "../docs/book/src/cli.md";

/// Environment variables the help shows the values of: given empty, so the page does not depend on the shell
/// the tests run in.
const SHOWN: &[&str] = &[
    "FAKECLOUD_ADMIN_TOKEN",
    "FAKECLOUD_ADOPT_NETWORKS",
    "FAKECLOUD_CREDENTIALS",
    "FAKECLOUD_DB",
    "FAKECLOUD_ENDPOINT",
    "FAKECLOUD_HOLD_PUBLIC_POOL",
    "FAKECLOUD_LISTEN",
    "FAKECLOUD_LOOPBACK_INSTANCES",
    "FAKECLOUD_PUBLIC_POOL",
    "FAKECLOUD_SEED",
    "FAKECLOUD_SERVE_LOAD_BALANCERS",
    "FAKECLOUD_SNAPSHOT_DIR",
    "FAKECLOUD_USER_TOKEN",
    "KUBECONFIG",
];

#[test]
fn the_books_cli_page_is_what_every_command_prints() {
    let cases = trycmd::TestCases::new();
    cases.register_bin("fakecloud", std::path::Path::new(env!("CARGO_BIN_EXE_fakecloud")));
    for var in SHOWN {
        cases.env(*var, "");
    }
    cases.case(PAGE);
}

/// Every command, down to the last subcommand, has its `--help` on the page: a new command cannot be left out.
#[test]
fn every_command_is_on_the_books_cli_page() {
    fn paths(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
        out.push(prefix.to_string());
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            paths(sub, &format!("{prefix} {}", sub.get_name()), out);
        }
    }
    let page = std::fs::read_to_string(PAGE).unwrap();
    let mut all = Vec::new();
    paths(&fakecloud_cli::Cli::command(), "fakecloud", &mut all);
    let missing: Vec<&String> = all.iter().filter(|p| !page.contains(&format!("$ {p} --help\n"))).collect();
    assert!(missing.is_empty(), "not on {PAGE}: {missing:?}");
    assert!(all.len() > 60, "the walk found the commands: {all:?}");
}

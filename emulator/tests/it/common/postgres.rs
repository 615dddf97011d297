//! A real PostgreSQL server for a test: `initdb` into a temp dir, started on a free loopback port, stopped (and
//! its files removed) when dropped. Debian's binaries: on PATH, or in /usr/lib/postgresql/<version>/bin
//! (`make deps` installs them).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    /// With TLS: the CA that signed the server's certificate (PEM), as a client's `sslrootcert`.
    pub ca: Option<PathBuf>,
    bin: PathBuf,
    /// As whom the server runs: PostgreSQL refuses to run as root.
    uid: Option<u32>,
    port: u16,
    /// The server's options (`pg_ctl -o`), to start it again as it was.
    options: String,
    dir: tempfile::TempDir,
}

/// nobody: an unprivileged user every Debian machine has.
const NOBODY: u32 = 65534;

impl Postgres {
    pub fn start() -> Self {
        Self::start_with(false, 400)
    }

    /// A server that also speaks TLS, with a certificate for 127.0.0.1 from a CA of its own (as a managed
    /// database has one from its provider's).
    pub fn start_with_tls() -> Self {
        Self::start_with(true, 400)
    }

    /// A server that allows `max` connections in all (three of them for superusers only, PostgreSQL's default).
    pub fn start_with_max_connections(max: u32) -> Self {
        Self::start_with(false, max)
    }

    fn start_with(tls: bool, max_connections: u32) -> Self {
        let bin = bin_dir();
        let dir = tempfile::tempdir().expect("temp dir");
        let uid = nix::unistd::Uid::current().is_root().then_some(NOBODY);
        if let Some(uid) = uid {
            nix::unistd::chown(dir.path(), Some(uid.into()), Some(uid.into())).expect("chown the temp dir");
        }
        let data = dir.path().join("data");
        run(as_server(Command::new(bin.join("initdb")), uid, dir.path())
            .args(["--no-sync", "--auth=trust", "--username=fakecloud", "--encoding=UTF8", "--locale=C"])
            .arg("-D")
            .arg(&data));
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port();
        // (Connections: every emulator of a test process, and each of its accounts, has pools on the one server.)
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -c max_connections={max_connections} -p {port} -k {}",
            dir.path().display()
        );
        let ca = tls.then(|| {
            let (ca, cert, key) = certificates();
            for (name, pem) in [("ca.crt", &ca), ("server.crt", &cert), ("server.key", &key)] {
                write_private(&dir.path().join(name), pem, uid);
            }
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                dir.path().display()
            ));
            dir.path().join("ca.crt")
        });
        let pg = Self { ca, bin, uid, port, options, dir };
        pg.pg_ctl(&["-w", "-t", "60"], "start");
        pg
    }

    /// Stop the server (its clients' connections end), as a database that goes away does.
    pub fn stop(&self) {
        self.pg_ctl(&["-m", "fast", "-w", "-t", "60"], "stop");
    }

    /// Start it again, as it was, after [`Postgres::stop`].
    pub fn start_again(&self) {
        self.pg_ctl(&["-w", "-t", "60"], "start");
    }

    fn pg_ctl(&self, flags: &[&str], action: &str) {
        let mut cmd = as_server(Command::new(self.bin.join("pg_ctl")), self.uid, self.dir.path());
        run(cmd
            .args(flags)
            .args(["-o", &self.options, "-l"])
            .arg(self.dir.path().join("log"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg(action));
    }

    /// A new database, named for the order of the call.
    pub async fn new_database(&self) -> String {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        self.database(&format!("t{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))).await
    }

    /// The URL of a database `name`, created now.
    pub async fn database(&self, name: &str) -> String {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres")).await.expect("connect to postgres");
        // (A test's own name, not input.)
        let create = sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\""));
        sqlx::query(create).execute(&mut admin).await.expect("create the database");
        self.url(name)
    }

    /// The URL of the database `name` (created or not).
    pub fn url(&self, name: &str) -> String {
        format!("postgres://fakecloud@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let mut cmd = as_server(Command::new(self.bin.join("pg_ctl")), self.uid, self.dir.path());
        let _ = cmd.args(["-m", "immediate", "-D"]).arg(self.dir.path().join("data")).arg("stop").output();
    }
}

static SHARED: std::sync::OnceLock<Postgres> = std::sync::OnceLock::new();

/// One server for every test of this process that asks (a database each), started on first use. A static is
/// never dropped: a watchdog stops the server and removes its files once this process has gone, however it ended.
pub fn shared() -> &'static Postgres {
    SHARED.get_or_init(|| {
        let pg = Postgres::start();
        let watch = format!(
            "while [ -d /proc/{pid} ]; do sleep 0.5; done; \"$0\" -m immediate -D \"$1/data\" stop; rm -rf \"$1\"",
            pid = std::process::id()
        );
        // Never waited for: it outlives this process on purpose (init reaps it).
        #[allow(clippy::zombie_processes)]
        as_server(Command::new("sh"), pg.uid, pg.dir.path())
            // A group of its own: a signal to this process's group (Ctrl-C, `timeout`) must not take it too.
            .process_group(0)
            .args(["-c", &watch])
            .arg(pg.bin.join("pg_ctl"))
            .arg(pg.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the PostgreSQL server's watchdog");
        pg
    })
}

/// `cmd` run as the server's user, in its directory: PostgreSQL's programs look for themselves from the working
/// directory, which that user may not be allowed into (a checkout under /root).
fn as_server(mut cmd: Command, uid: Option<u32>, dir: &Path) -> Command {
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.current_dir(dir);
    cmd
}

/// A CA's certificate, and a certificate and key for 127.0.0.1 it signed (PEM).
fn certificates() -> (String, String, String) {
    let mut ca = rcgen::CertificateParams::new(Vec::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name.push(rcgen::DnType::CommonName, "fakecloud test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().expect("CA key")).expect("CA");
    let key = rcgen::KeyPair::generate().expect("server key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("server params")
        .signed_by(&key, &ca)
        .expect("server certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A file readable by its owner only (PostgreSQL refuses a key others can read), owned by `uid` if set.
fn write_private(path: &Path, contents: &str, uid: Option<u32>) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).expect("create");
    std::io::Write::write_all(&mut f, contents.as_bytes()).expect("write");
    if let Some(uid) = uid {
        nix::unistd::chown(path, Some(uid.into()), Some(uid.into())).expect("chown");
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (is PostgreSQL installed? `make deps`)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where initdb and pg_ctl are: on PATH, else the newest of Debian's versioned directories.
fn bin_dir() -> PathBuf {
    if let Some(dir) =
        std::env::var_os("PATH").and_then(|path| std::env::split_paths(&path).find(|d| d.join("initdb").is_file()))
    {
        return dir;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| Path::new(bin).join("initdb").is_file())
        .collect();
    versions.sort_by_key(|p| p.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()?.parse::<u32>().ok()));
    versions.pop().expect("PostgreSQL's initdb is not installed: run `make deps`")
}
